//! `GET /devices` answers in pages (issue 46: one account's 20,000 devices
//! made a 3.7 MB answer): at most `--max-page-devices` a page, by id, each
//! page naming where the next starts, every device exactly once.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer};

/// The pages of the list as `api` reads them with `query`, following
/// `next`: each page's devices.
async fn pages(api: &crate::common::Api, query: &str) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let (st, v) = api.get(&format!("/api/v1/devices?{query}{after}")).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        pages.push(v["devices"].as_array().unwrap().clone());
        match &v["next"] {
            Value::String(next) => after = format!("&after={next}"),
            Value::Null => return pages,
            other => panic!("next is {other}"),
        }
        assert!(pages.len() < 20, "the pages never end: {pages:?}");
    }
}

#[tokio::test]
async fn the_device_list_comes_in_bounded_pages_that_name_every_device_once() {
    let srv = TestServer::start(&["--max-page-devices", "3"]);
    let a = srv.register("pages").await;
    for i in 0..6 {
        let (st, v) = srv
            .anon()
            .post(
                "/api/v1/login",
                json!({"user": "pages", "password": PASSWORD, "device": format!("d{i}")}),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }

    // Seven devices, three a page at most: 3, 3, 1, in id order.
    let got = pages(&a, "").await;
    assert_eq!(
        got.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 3, 1],
        "{got:?}"
    );
    let ids = |pages: &[Vec<Value>]| -> Vec<String> {
        pages
            .concat()
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = ids(&got);
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "not once each by id: {all:?}"
    );

    // A smaller limit is kept; a larger one is cut to the server's.
    let got = pages(&a, "limit=2").await;
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2, 1]);
    assert_eq!(ids(&got), all);
    // Exactly one device is the caller's, on whichever page it falls.
    let current = got.concat().iter().filter(|d| d["current"] == true).count();
    assert_eq!(current, 1);
    let (st, v) = a.get("/api/v1/devices?limit=1000").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["devices"].as_array().unwrap().len(), 3, "{v}");

    // A bad limit is a 400 that says what is wrong.
    let (st, v) = a.get("/api/v1/devices?limit=lots").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}
