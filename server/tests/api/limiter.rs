//! The register/login limiter under attack: its state stays bounded
//! whatever names clients send.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{PASSWORD, TestServer, metric};

/// A user name far past the 64-character limit, different for each `n`.
fn huge_name(n: usize) -> String {
    format!("{n}-{}", "x".repeat(100_000))
}

#[tokio::test]
async fn huge_user_names_are_refused_before_they_reach_the_limiter() {
    let (srv, metrics) = TestServer::start_with_metrics(&["--auth-rate-per-ip", "100000"]);
    let anon = srv.anon();
    let mut answers = Vec::new();
    for n in 0..200 {
        let (path, body) = if n % 2 == 0 {
            (
                "/api/v1/login",
                json!({"user": huge_name(n), "password": "wrong-password", "device": "d"}),
            )
        } else {
            (
                "/api/v1/register",
                json!({"user": huge_name(n), "password": PASSWORD, "device": "d"}),
            )
        };
        answers.push((path, anon.post(path, body).await));
    }
    // Nothing was keyed by those names: at most the one client address.
    let keys = metric(&metrics, "auth_limiter_keys").await;
    assert!(keys <= 1.0, "the limiter holds {keys} buckets");
    for (path, (st, v)) in answers {
        assert_eq!(st, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["code"], "bad_request", "{v}");
        assert!(v["message"].as_str().unwrap().contains("user name"), "{v}");
    }

    // A valid name is still limited as before.
    let (st, _) = anon
        .post(
            "/api/v1/login",
            json!({"user": "nobody", "password": "wrong-password", "device": "d"}),
        )
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert!(metric(&metrics, "auth_limiter_keys").await <= 2.0);
}
