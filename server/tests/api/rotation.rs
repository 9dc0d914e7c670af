//! Key rotation's staging account (`POST /rotation`, `/rotation/commit`):
//! one per account, held by the device that began it. Another device with
//! the current key abandons one left unfinished and begins its own; a
//! revoke ends the rotation the revoked device began; the rotation a
//! device no longer holds cannot be committed from it.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Api, PASSWORD, TestServer, eventually, segment};

/// Another device of `user`'s account named `name`, and its id.
async fn device(srv: &TestServer, user: &str, name: &str) -> (Api, String) {
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": name}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let id = v["device_id"].as_str().unwrap().to_owned();
    (srv.anon().with_token(v["token"].as_str().unwrap()), id)
}

/// `POST /rotation` with the new key's check value: its answer.
async fn begin(api: &Api, kcv: &str) -> Value {
    let (st, v) = api
        .post("/api/v1/rotation", json!({"key_check": kcv}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

fn staging(srv: &TestServer, begun: &Value) -> Api {
    srv.anon().with_token(begun["token"].as_str().unwrap())
}

async fn key_check(api: &Api) -> (StatusCode, Value) {
    api.get("/api/v1/key-check").await
}

async fn set_key_check(api: &Api, kcv: &str) -> (StatusCode, Value) {
    api.call(
        Method::PUT,
        "/api/v1/key-check",
        Some(json!({"key_check": kcv})),
    )
    .await
}

// Key check values of three keys, as base64.
const OLD: &str = "b2xkIGtleSBjaGVjayB2YWx1ZQ==";
const LAPTOPS: &str = "bGFwdG9wJ3MgbmV3IGtleQ==";
const DESKTOPS: &str = "ZGVza3RvcCdzIG5ldyBrZXk=";

#[tokio::test]
async fn another_device_abandons_an_unfinished_rotation_and_begins_its_own() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("rotating").await;
    let (desktop, _) = device(&srv, "rotating", "desktop").await;
    assert_eq!(set_key_check(&laptop, OLD).await.0, StatusCode::OK);
    laptop
        .push((0..4).map(|i| segment(1, i, 64)).collect())
        .await;

    // The laptop stages part of its rotation, then is cut off.
    let begun = begin(&laptop, LAPTOPS).await;
    assert_eq!(begun["fresh"], true, "{begun}");
    let laptops = staging(&srv, &begun);
    let (_, v) = key_check(&laptops).await;
    assert_eq!(v["key_check"], LAPTOPS, "begin sets the new key's value");
    laptops.push(vec![segment(9, 1, 64)]).await;
    // Run again on the laptop: the same rotation, what it staged kept.
    let again = begin(&laptop, LAPTOPS).await;
    assert_eq!(again["fresh"], false, "{again}");
    assert_eq!(again["abandoned"], false, "{again}");
    assert_eq!(
        laptops.get("/api/v1/records?after=0").await.0,
        StatusCode::UNAUTHORIZED,
        "an earlier token of the staging device stops working"
    );
    let laptops = staging(&srv, &again);
    let (records, _) = laptops.pull_all(None).await;
    assert_eq!(records.len(), 1);

    // The desktop, with the current key too, begins its own: the laptop's
    // is abandoned (its token ends, nothing it staged is the desktop's).
    let begun = begin(&desktop, DESKTOPS).await;
    assert_eq!(begun["fresh"], true, "{begun}");
    assert_eq!(begun["abandoned"], true, "{begun}");
    assert_eq!(begun["abandoned_by"], "first", "the device register named");
    assert_eq!(
        laptops.get("/api/v1/records?after=0").await.0,
        StatusCode::UNAUTHORIZED
    );
    let desktops = staging(&srv, &begun);
    let (_, v) = key_check(&desktops).await;
    assert_eq!(v["key_check"], DESKTOPS);
    let (records, _) = desktops.pull_all(None).await;
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(set_key_check(&desktops, DESKTOPS).await.0, StatusCode::OK);
    // The laptop cannot commit the desktop's rotation.
    let (st, v) = laptop
        .post("/api/v1/rotation/commit", json!({"through_seq": 4}))
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("rotation_abandoned")),
        "{v}"
    );
    assert!(
        !v["message"]
            .as_str()
            .unwrap()
            .contains("this device has another key"),
        "{v}"
    );
    // The desktop stages and commits.
    desktops
        .push((0..4).map(|i| segment(2, 10 + i, 64)).collect())
        .await;
    let (st, v) = desktop
        .post("/api/v1/rotation/commit", json!({"through_seq": 4}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (_, v) = key_check(&desktop).await;
    assert_eq!(v["key_check"], DESKTOPS);
    let (records, _) = desktop.pull_all(None).await;
    assert_eq!(records.len(), 4, "only the desktop's staged records");
}

#[tokio::test]
async fn revoking_a_device_ends_the_rotation_it_began() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("revoking").await;
    let (desktop, _) = device(&srv, "revoking", "desktop").await;
    let (_, v) = laptop.get("/api/v1/devices").await;
    let laptop_id = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] != "desktop")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(set_key_check(&laptop, OLD).await.0, StatusCode::OK);
    laptop.push(vec![segment(1, 1, 64)]).await;
    let begun = begin(&laptop, LAPTOPS).await;
    let laptops = staging(&srv, &begun);
    laptops.push(vec![segment(9, 1, 64)]).await;

    // The laptop is lost: revoking it ends its rotation with it.
    let (st, v) = desktop
        .call(
            Method::DELETE,
            &format!("/api/v1/devices/{laptop_id}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, _) = laptops.get("/api/v1/records?after=0").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "the staging token survived");
    let (st, _) = laptops
        .post("/api/v1/records", json!({"segments": [segment(9, 2, 64)]}))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);

    // The desktop rotates from scratch: nothing of the laptop's is there,
    // and nothing was left to abandon.
    let begun = begin(&desktop, DESKTOPS).await;
    assert_eq!(begun["fresh"], true, "{begun}");
    assert_eq!(begun["abandoned"], false, "{begun}");
    let desktops = staging(&srv, &begun);
    let (records, _) = desktops.pull_all(None).await;
    assert!(records.is_empty(), "{records:?}");
    desktops.push(vec![segment(2, 5, 64)]).await;
    let (st, v) = desktop
        .post("/api/v1/rotation/commit", json!({"through_seq": 1}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // What the laptop staged is deleted with its staging account (and the
    // old account's data with the commit): the desktop's record is left.
    assert!(
        eventually(|| srv.body_rows().len() == 1).await,
        "{:?}",
        srv.body_rows()
    );
}

/// A rotation left unfinished past `--rotation-ttl-secs` (a device that
/// began it and never came back, or a stolen token's) is abandoned by the
/// server: its staging token stops working, what it staged is deleted, and
/// the next begin is fresh and abandons nothing. Before, a staging account
/// held its second copy of the data for good.
#[tokio::test]
async fn a_rotation_left_unfinished_past_its_time_is_abandoned_and_its_staging_deleted() {
    let srv = TestServer::start(&["--rotation-ttl-secs", "2"]);
    let laptop = srv.register("expiring").await;
    assert_eq!(set_key_check(&laptop, OLD).await.0, StatusCode::OK);
    laptop.push(vec![segment(1, 1, 64)]).await;
    let begun = begin(&laptop, LAPTOPS).await;
    let laptops = staging(&srv, &begun);
    laptops.push(vec![segment(9, 1, 64)]).await;
    assert_eq!(srv.body_rows().len(), 2);

    let mut gone = false;
    for _ in 0..60 {
        if laptops.get("/api/v1/records?after=0").await.0 == StatusCode::UNAUTHORIZED {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(gone, "the staging token outlived --rotation-ttl-secs");
    assert!(
        eventually(|| srv.body_rows().len() == 1).await,
        "what the rotation staged is still stored: {:?}",
        srv.body_rows()
    );
    let (records, _) = laptop.pull_all(None).await;
    assert_eq!(records.len(), 1, "the account's own records stay");
    let again = begin(&laptop, LAPTOPS).await;
    assert_eq!(again["fresh"], true, "{again}");
    assert_eq!(again["abandoned"], false, "{again}");
}

/// A body that is not an object is no begin: serde would read `[]` as a
/// request whose fields are all left out, and open a staging account.
#[tokio::test]
async fn a_begin_whose_body_is_not_an_object_is_refused_and_stages_nothing() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("arrays").await;
    let (st, v) = laptop.post("/api/v1/rotation", json!([])).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("expected an object")),
        "{v}"
    );
    // Nothing was staged: a begin now is the account's first, fresh one.
    let begun = begin(&laptop, LAPTOPS).await;
    assert_eq!(begun["fresh"], json!(true), "{begun}");
}

/// A rotation's staging area is its account's: held to the account's own
/// quota, refused while the account is disabled, and the committed account
/// keeps both settings.
#[tokio::test]
async fn a_rotation_is_held_to_its_accounts_quota_and_disabled_with_it() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("settled").await;
    assert_eq!(set_key_check(&laptop, OLD).await.0, StatusCode::OK);
    laptop.push(vec![segment(1, 1, 64)]).await;
    let staged = staging(&srv, &begin(&laptop, LAPTOPS).await);
    let admin = |args: &[&str]| {
        let out = srv.admin(args);
        assert!(
            out.status.success(),
            "admin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    admin(&["quota", "settled", "123456"]);
    let (_, st) = staged.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], 123_456, "{st}");

    admin(&["disable", "settled"]);
    let (st, v) = staged.get("/api/v1/status").await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("account_disabled")),
        "the staging token of a disabled account: {v}"
    );
    admin(&["enable", "settled"]);
    staged.push(vec![segment(9, 1, 64)]).await;
    let (st, v) = laptop
        .post("/api/v1/rotation/commit", json!({"through_seq": 1}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (_, st) = laptop.get("/api/v1/status").await;
    assert_eq!(
        st["quota_bytes"], 123_456,
        "the rotated account keeps its quota: {st}"
    );
}

/// A staging account is room for a copy of its account, not for a second
/// quota's worth: past the copy (and its slack), what it is sent is
/// refused as over quota, even on a server without a quota.
#[tokio::test]
async fn a_staging_account_holds_a_copy_of_its_account_and_no_more() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("copied").await;
    assert_eq!(set_key_check(&laptop, OLD).await.0, StatusCode::OK);
    laptop.push(vec![segment(1, 1, 1000)]).await;
    let staged = staging(&srv, &begin(&laptop, LAPTOPS).await);
    let (_, st) = staged.get("/api/v1/status").await;
    let room = st["quota_bytes"]
        .as_u64()
        .expect("a staging account has a quota");
    assert!(
        (8 << 20..9 << 20).contains(&room),
        "a copy of ~1 kB and the slack: {room}"
    );
    // The copy fits; a blob past the slack does not, on this server
    // without a quota.
    staged.push(vec![segment(1, 1, 1000)]).await;
    let (st, v) = staged
        .put_blob(&crate::common::kid(4, 9), vec![5u8; 9 << 20])
        .await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::INSUFFICIENT_STORAGE, &json!("quota_exceeded")),
        "{v}"
    );
    // The account itself has none.
    let (_, st) = laptop.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], Value::Null, "{st}");
}
