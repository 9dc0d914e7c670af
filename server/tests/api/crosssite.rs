//! What a web page in the user's browser can make the server do: no JSON
//! call runs without `Content-Type: application/json` (which a page cannot
//! send cross-site without a preflight the server never grants), and with a
//! public URL set, only requests for that host are served.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Api, PASSWORD, TestServer};

/// POSTs `body` as bytes with `content_type` (none if `None`).
async fn post_typed(
    api: &Api,
    path: &str,
    content_type: Option<&str>,
    body: &Value,
) -> (StatusCode, Value) {
    let mut req = api
        .http
        .post(format!("{}{path}", api.base))
        .body(serde_json::to_vec(body).unwrap());
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = req.send().await.unwrap();
    let st = resp.status();
    let text = resp.text().await.unwrap();
    (
        st,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn json_calls_take_only_application_json() {
    let srv = TestServer::start(&[]);
    let anon = srv.anon();
    let reg = json!({"user": "typed", "password": PASSWORD, "device": "d"});
    // What a cross-site form or fetch without preflight can send, and none.
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        for path in ["/api/v1/register", "/api/v1/login"] {
            let (st, v) = post_typed(&anon, path, ct, &reg).await;
            assert_eq!(
                (st, v["code"].as_str()),
                (
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    Some("unsupported_media_type")
                ),
                "{path} with {ct:?}: {v}"
            );
            assert!(
                v["message"].as_str().unwrap().contains("application/json"),
                "{v}"
            );
        }
    }
    let (_, st) = srv.anon().get("/api/v1/capabilities").await;
    assert!(st.is_object());
    // No account came of it; with the right type, one does.
    let (st, v) = post_typed(
        &anon,
        "/api/v1/register",
        Some("application/json; charset=utf-8"),
        &reg,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let a = anon.with_token(v["token"].as_str().unwrap());

    // Calls with a token too, the JSON push included.
    let names = json!({"names": []});
    let push = json!({"segments": []});
    for (path, body) in [
        ("/api/v1/blobs/missing", &names),
        ("/api/v1/blobs/purge", &names),
        ("/api/v1/records", &push),
    ] {
        for ct in [Some("text/plain"), None] {
            let (st, v) = post_typed(&a, path, ct, body).await;
            assert_eq!(
                st,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{path} with {ct:?}: {v}"
            );
        }
        let (st, v) = post_typed(&a, path, Some("application/json"), body).await;
        assert_eq!(st, StatusCode::OK, "{path}: {v}");
    }
}

/// GETs `path` with this `Host` header.
async fn get_as(srv: &TestServer, host: &str, path: &str) -> (StatusCode, Value) {
    let resp = crate::common::http()
        .get(srv.url(path))
        .header("host", host)
        .send()
        .await
        .unwrap();
    let st = resp.status();
    let text = resp.text().await.unwrap();
    (
        st,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn with_a_public_url_only_its_host_is_served() {
    let srv = TestServer::start(&["--public-url", "https://sync.example.org"]);
    for host in [
        "sync.example.org",
        "SYNC.example.org",
        "sync.example.org:443",
    ] {
        let (st, v) = get_as(&srv, host, "/api/v1/capabilities").await;
        assert_eq!(st, StatusCode::OK, "{host}: {v}");
    }
    // What a page rebinding its own name to this server would send, and
    // the loopback address itself.
    for host in [
        "evil.example".to_owned(),
        "sync.example.org:8443".to_owned(),
        srv.addr.clone(),
    ] {
        let (st, v) = get_as(&srv, &host, "/api/v1/capabilities").await;
        assert_eq!(
            (st, v["code"].as_str()),
            (StatusCode::MISDIRECTED_REQUEST, Some("misdirected_request")),
            "{host}: {v}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("https://sync.example.org"),
            "{v}"
        );
    }
    // A health check from the machine or a load balancer still answers.
    let (st, _) = get_as(&srv, &srv.addr, "/healthz").await;
    assert_eq!(st, StatusCode::OK);
}
