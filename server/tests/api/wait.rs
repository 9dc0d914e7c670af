//! `GET /records/wait`: the long poll `evi sync watch` parks on. It
//! answers when another device's record commits, not for the caller's own,
//! survives the server's connection timeouts, is capped (503 with
//! Retry-After), rate limited per device (429), and ends at shutdown.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Api, PASSWORD, TestServer, metric, segment};

/// A second device of `user`'s account.
async fn login(srv: &TestServer, user: &str) -> Api {
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": "second"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    srv.anon().with_token(v["token"].as_str().unwrap())
}

/// Waits until the server holds `n` waits, reading its metrics.
pub async fn parked(metrics: &str, n: f64) {
    for _ in 0..200 {
        if metric(metrics, "waiters").await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server never held {n} waits");
}

#[tokio::test]
async fn a_wait_answers_for_other_devices_records_not_its_own() {
    let (srv, metrics) = TestServer::start_with_metrics(&[]);
    let a = srv.register("waiter").await;
    let b = login(&srv, "waiter").await;
    let (_, caps) = a.get("/api/v1/capabilities").await;
    assert_eq!(caps["max_wait_secs"], 60);

    // Its own push does not end the wait: it times out with nothing.
    a.push(vec![segment(1, 1, 10)]).await;
    let (st, v) = a.get("/api/v1/records/wait?after=0&timeout=1").await;
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 0})));
    // Another device's record after the cursor is there: at once.
    let (_, v) = b.get("/api/v1/records/wait?after=0&timeout=30").await;
    assert_eq!(v, json!({"pending": 1}));

    // Parked, then woken by the other device's commit.
    let parked_wait = {
        let b = b.clone();
        tokio::spawn(async move { b.get("/api/v1/records/wait?after=1&timeout=30").await })
    };
    parked(&metrics, 1.0).await;
    let v = a.push(vec![segment(1, 2, 10)]).await;
    assert_eq!(v["newest_seq"], 2);
    let (st, v) = tokio::time::timeout(Duration::from_secs(10), parked_wait)
        .await
        .expect("the commit woke the wait")
        .unwrap();
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 1})));
    parked(&metrics, 0.0).await;

    // Another account's commit wakes nobody here.
    let other = srv.register("stranger").await;
    let mine = {
        let b = b.clone();
        tokio::spawn(async move { b.get("/api/v1/records/wait?after=2&timeout=2").await })
    };
    parked(&metrics, 1.0).await;
    other.push(vec![segment(5, 5, 10)]).await;
    assert_eq!(mine.await.unwrap().1, json!({"pending": 0}));

    let (st, v) = a.get("/api/v1/records/wait?after=x").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}

#[tokio::test]
async fn the_connection_timeouts_do_not_end_a_wait() {
    let srv = TestServer::start(&["--idle-timeout", "1", "--header-timeout", "1"]);
    let a = srv.register("patient").await;
    let (st, v) = a.get("/api/v1/records/wait?after=0&timeout=3").await;
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 0})));
}

#[tokio::test]
async fn past_the_cap_503_with_retry_after_and_past_the_rate_429() {
    let (srv, metrics) =
        TestServer::start_with_metrics(&["--max-waiters", "1", "--wait-rate-per-device", "3"]);
    let a = srv.register("crowd").await;
    let b = login(&srv, "crowd").await;
    let held = {
        let a = a.clone();
        tokio::spawn(async move { a.get("/api/v1/records/wait?timeout=30").await })
    };
    parked(&metrics, 1.0).await;
    let resp = b
        .http
        .get(format!("{}/api/v1/records/wait?timeout=1", b.base))
        .bearer_auth(b.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "5");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "unavailable", "{v}");
    // A record from b ends a's wait; b's next waits answer at once (a's
    // record is there), until b passes its rate.
    a.push(vec![segment(1, 1, 10)]).await;
    b.push(vec![segment(1, 2, 10)]).await;
    assert_eq!(held.await.unwrap().1, json!({"pending": 1}));
    parked(&metrics, 0.0).await;
    for _ in 0..2 {
        let (st, v) = b.get("/api/v1/records/wait").await;
        assert_eq!((st, v), (StatusCode::OK, json!({"pending": 1})));
    }
    let (st, v) = b.get("/api/v1/records/wait").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    // Only b's: a's waits go on.
    let (st, _) = a.get("/api/v1/records/wait").await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn shutdown_ends_parked_waits_at_once() {
    let (mut srv, metrics) = TestServer::start_with_metrics(&[]);
    let a = srv.register("leaving").await;
    let held = {
        let a = a.clone();
        tokio::spawn(async move { a.get("/api/v1/records/wait?timeout=60").await })
    };
    parked(&metrics, 1.0).await;
    let start = std::time::Instant::now();
    // SIGTERM: a graceful stop.
    std::process::Command::new("kill")
        .arg(srv.pid().to_string())
        .status()
        .unwrap();
    let (st, v) = held.await.unwrap();
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(srv.terminate_wait().success());
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the stop waited for the wait"
    );
}

/// A third device of `user`'s account, named `name`; its id too.
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

#[tokio::test]
async fn a_rotation_ends_parked_waits_with_key_rotated_and_a_revoked_devices_with_401() {
    let (srv, metrics) = TestServer::start_with_metrics(&[]);
    let a = srv.register("rotating").await;
    let (b, _) = device(&srv, "rotating", "desktop").await;
    let (c, c_id) = device(&srv, "rotating", "stolen").await;
    let park = |api: &Api| {
        let api = api.clone();
        tokio::spawn(async move { api.get("/api/v1/records/wait?after=0&timeout=30").await })
    };
    let (b_wait, c_wait) = (park(&b), park(&c));
    let a_wait = park(&a);
    parked(&metrics, 3.0).await;

    // A rotation with nothing to carry: the staging account gets its key
    // check value, then A commits it, revoking C.
    let (st, v) = a.post("/api/v1/rotation", json!({})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let staging = srv.anon().with_token(v["token"].as_str().unwrap());
    let (st, v) = staging
        .call(
            reqwest::Method::PUT,
            "/api/v1/key-check",
            Some(json!({"key_check": "a2V5IGNoZWNr"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = a
        .post(
            "/api/v1/rotation/commit",
            json!({"through_seq": 0, "revoke": [c_id]}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    let ended = |w: tokio::task::JoinHandle<(StatusCode, Value)>| async move {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("the commit ended the wait")
            .unwrap()
    };
    // B holds the old key: told so, as its next call would be, not that
    // its token is gone.
    let (st, v) = ended(b_wait).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_rotated")),
        "{v}"
    );
    let (st, v) = b.get("/api/v1/records/wait?after=0&timeout=1").await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_rotated")),
        "{v}"
    );
    // C was revoked: 401, nothing more.
    let (st, v) = ended(c_wait).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized")),
        "{v}"
    );
    // A holds the new key: its wait ends empty, and it waits again on
    // the account as it is now.
    let (st, v) = ended(a_wait).await;
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 0})));
    let (st, v) = a.get("/api/v1/records/wait?after=0&timeout=1").await;
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 0})));
}
