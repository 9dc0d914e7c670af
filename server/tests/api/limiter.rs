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
    // Its address, the name from that address, the name from anywhere.
    assert_eq!(metric(&metrics, "auth_limiter_keys").await, 3.0);
}

/// A login from `from` (the address a trusted proxy would name).
async fn login_from(srv: &TestServer, from: &str, user: &str, password: &str) -> StatusCode {
    srv.anon()
        .http
        .post(srv.url("/api/v1/login"))
        .header("x-forwarded-for", from)
        .json(&json!({"user": user, "password": password, "device": "d"}))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn wrong_passwords_from_one_address_do_not_lock_the_owner_out() {
    let srv = TestServer::start(&["--trust-forwarded-for", "--auth-rate-per-user", "3"]);
    let owner = srv.register("olive").await;
    let attacker = "203.0.113.66";
    let mut refused = false;
    for _ in 0..10 {
        match login_from(&srv, attacker, "olive", "wrong-password").await {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => {
                refused = true;
                break;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(refused, "the guessing address was never limited");
    // The attacker's address stays limited, even with the right password.
    assert_eq!(
        login_from(&srv, attacker, "olive", PASSWORD).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // The owner, from another address, logs in.
    assert_eq!(
        login_from(&srv, "198.51.100.1", "olive", PASSWORD).await,
        StatusCode::OK
    );
    // The owner's device works, password change included.
    assert_eq!(owner.get("/api/v1/status").await.0, StatusCode::OK);
    let (st, v) = owner
        .post(
            "/api/v1/password",
            json!({"old_password": PASSWORD, "new_password": "another password"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn wrong_old_passwords_limit_that_device_only() {
    let srv = TestServer::start(&["--trust-forwarded-for", "--auth-rate-per-user", "3"]);
    let owner = srv.register("pia").await;
    let mut refused = false;
    for _ in 0..10 {
        let (st, v) = owner
            .post(
                "/api/v1/password",
                json!({"old_password": "not the password", "new_password": "another password"}),
            )
            .await;
        match st {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => {
                refused = true;
                break;
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    assert!(
        refused,
        "password guessing through a token was never limited"
    );
    // Logins are not limited by the device's failures.
    assert_eq!(
        login_from(&srv, "198.51.100.2", "pia", PASSWORD).await,
        StatusCode::OK
    );
    assert_eq!(owner.get("/api/v1/status").await.0, StatusCode::OK);
}

/// A failed login says, at the default level, who was tried and from
/// where (the address the limiter counts: behind a trusted proxy, the
/// client's), in the form deploy/README.md's fail2ban filter matches.
#[tokio::test]
async fn a_failed_login_is_logged_with_its_user_name_and_client_address() {
    let srv = TestServer::start(&["--trust-forwarded-for"]);
    srv.register("quinn").await;
    let st = login_from(&srv, "203.0.113.9", "quinn", "wrong-password").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let st = login_from(&srv, "198.51.100.4", "nobody-here", "wrong-password").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    // The right password is no failure.
    assert_eq!(
        login_from(&srv, "203.0.113.9", "quinn", PASSWORD).await,
        StatusCode::OK
    );
    let log = srv.log();
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("login failed")).collect();
    assert_eq!(failed.len(), 2, "{log}");
    for (line, user, ip) in [
        (failed[0], "quinn", "203.0.113.9"),
        (failed[1], "nobody-here", "198.51.100.4"),
    ] {
        assert!(line.contains(" INFO "), "not at info: {line}");
        assert!(
            line.ends_with(&format!("login failed user={user} ip={ip}")),
            "{line}"
        );
    }
}

/// Starts an upload under `token` that sends its header and 10 of 1,000
/// body bytes, then stalls: the connection stays open, the handler waits.
async fn stalled_upload(addr: &str, token: &str, name: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n0123456789"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

#[tokio::test]
async fn one_account_holds_at_most_its_share_of_requests_in_flight() {
    let (srv, metrics) = TestServer::start_with_metrics(&["--max-requests-per-user", "2"]);
    let mallory = srv.register("mallory").await;
    let alice = srv.register("alice").await;
    let token = mallory.token.clone().unwrap();
    // Two uploads a valid token keeps open as long as a byte comes now
    // and then: before the bound, an account could hold every connection
    // this way.
    let first = stalled_upload(&srv.addr, &token, &crate::common::kid(4, 1)).await;
    let second = stalled_upload(&srv.addr, &token, &crate::common::kid(4, 2)).await;
    let both_held = {
        let mut held = false;
        for _ in 0..200 {
            if metric(&metrics, "requests_in_flight").await == 2.0 {
                held = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        held
    };
    assert!(
        both_held,
        "the two stalled uploads never both reached a handler"
    );
    // A third request of the same account, any route, is turned away at
    // once with a reason and a time to come back.
    let (st, v) = mallory.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], "rate_limited", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("2 requests in flight"),
        "{v}"
    );
    // Another account is not held up by it.
    let (st, v) = alice.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // When one upload goes away its place comes back.
    drop(first);
    let mut served = false;
    for _ in 0..200 {
        if mallory.get("/api/v1/status").await.0 == StatusCode::OK {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        served,
        "the account's place never came back after its upload ended"
    );
    drop(second);
}
