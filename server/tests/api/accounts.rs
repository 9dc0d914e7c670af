//! Register, login, devices, revocation, password change, key check,
//! registration modes, rate limits.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{PASSWORD, TestServer};

#[tokio::test]
async fn register_login_list_revoke_and_change_password() {
    let srv = TestServer::start(&[]);
    let laptop = srv.register("alice").await;

    let anon = srv.anon();
    let (st, v) = anon
        .post(
            "/api/v1/login",
            json!({"user": "alice", "password": PASSWORD, "device": "phone"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let phone = anon.with_token(v["token"].as_str().unwrap());
    let phone_id = v["device_id"].as_str().unwrap().to_owned();
    assert_eq!(v["user"], "alice");

    let (st, v) = laptop.get("/api/v1/devices").await;
    assert_eq!(st, StatusCode::OK);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let names: Vec<_> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "phone"]);
    assert_eq!(devices[0]["current"], true);
    assert_eq!(devices[1]["current"], false);
    assert!(devices[1]["last_seen_at"].is_string());

    // Revoke the phone: its token is dead from now on.
    let (st, _) = laptop
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/devices/{phone_id}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = phone.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(v["code"], "unauthorized");
    let (st, _) = laptop
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/devices/{phone_id}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = anon.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _) = anon.with_token("evi_nonsense").get("/api/v1/status").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);

    // Wrong password and unknown user: the same answer.
    let (st1, wrong) = anon
        .post(
            "/api/v1/login",
            json!({"user": "alice", "password": "nope-nope", "device": "x"}),
        )
        .await;
    let (st2, unknown) = anon
        .post(
            "/api/v1/login",
            json!({"user": "nobody", "password": "nope-nope", "device": "x"}),
        )
        .await;
    assert_eq!(
        (st1, st2),
        (StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED)
    );
    assert_eq!(wrong, unknown);
    assert_eq!(wrong["code"], "invalid_credentials");

    // A second device, then a password change revokes it.
    let (_, v) = anon
        .post(
            "/api/v1/login",
            json!({"user": "alice", "password": PASSWORD, "device": "tablet"}),
        )
        .await;
    let tablet = anon.with_token(v["token"].as_str().unwrap());
    let (st, v) = laptop
        .post(
            "/api/v1/password",
            json!({"old_password": PASSWORD, "new_password": "a new password"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["revoked_devices"], 1);
    assert_eq!(
        tablet.get("/api/v1/status").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(laptop.get("/api/v1/status").await.0, StatusCode::OK);
    let (st, _) = anon
        .post(
            "/api/v1/login",
            json!({"user": "alice", "password": "a new password", "device": "y"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK);

    // Taken user name.
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "alice", "password": PASSWORD, "device": "z"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_exists"))
    );
}

#[tokio::test]
async fn key_check_is_set_once() {
    let srv = TestServer::start(&[]);
    let a = srv.register("kc").await;
    let (st, v) = a.get("/api/v1/key-check").await;
    assert_eq!(
        (st, &v),
        (
            StatusCode::OK,
            &json!({"key_check": null, "key_proof": false})
        )
    );
    let put = |val: &'static str| {
        let a = a.clone();
        async move {
            a.call(
                reqwest::Method::PUT,
                "/api/v1/key-check",
                Some(json!({"key_check": val})),
            )
            .await
        }
    };
    assert_eq!(put("AAEC").await.0, StatusCode::OK);
    assert_eq!(put("AAEC").await.0, StatusCode::OK);
    let (st, v) = put("AAED").await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_check_mismatch"))
    );
    assert_eq!(put("not base64!").await.0, StatusCode::BAD_REQUEST);
    let (_, v) = a.get("/api/v1/key-check").await;
    assert_eq!(v["key_check"], "AAEC");
}

#[tokio::test]
async fn invite_and_closed_registration() {
    let srv = TestServer::start(&["--registration", "invite"]);
    let anon = srv.anon();
    let body = |invite: Option<&str>| json!({"user": "bob", "password": PASSWORD, "device": "d", "invite": invite});
    let (st, v) = anon.post("/api/v1/register", body(None)).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("invalid_invite"))
    );
    let (st, _) = anon.post("/api/v1/register", body(Some("deadbeef"))).await;
    assert_eq!(st, StatusCode::FORBIDDEN);

    let out = srv.invite_cmd().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(code.len(), 32);
    let (st, v) = anon.post("/api/v1/register", body(Some(&code))).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // One-time.
    let again = json!({"user": "carol", "password": PASSWORD, "device": "d", "invite": code});
    assert_eq!(
        anon.post("/api/v1/register", again).await.0,
        StatusCode::FORBIDDEN
    );

    let closed = TestServer::start(&["--registration", "closed"]);
    let (st, v) = closed.anon().post("/api/v1/register", body(None)).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("registration_closed"))
    );
}

/// A one-time code from `evi-server invite` on the server's data folder.
fn invite_code(srv: &TestServer) -> String {
    let out = srv.invite_cmd().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn invite_mode_checks_the_code_before_saying_a_name_is_taken() {
    let srv = TestServer::start(&["--registration", "invite"]);
    let anon = srv.anon();
    let body = |user: &str, invite: &str| json!({"user": user, "password": PASSWORD, "device": "d", "invite": invite});
    let first = invite_code(&srv);
    let (st, v) = anon.post("/api/v1/register", body("alice", &first)).await;
    assert_eq!(st, StatusCode::OK, "{v}");

    // Without a valid code, a taken name and a free one get the same answer.
    let wrong = "0123456789abcdef0123456789abcdef";
    for user in ["alice", "Alice", "nobody"] {
        let (st, v) = anon.post("/api/v1/register", body(user, wrong)).await;
        assert_eq!(
            (st, v["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("invalid_invite")),
            "{user}: {v}"
        );
    }
    // A used code is no valid code either.
    let (st, v) = anon.post("/api/v1/register", body("alice", &first)).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("invalid_invite"))
    );

    // With a valid code, a taken name is 409 and the code stays unused.
    let second = invite_code(&srv);
    let (st, v) = anon.post("/api/v1/register", body("alice", &second)).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_exists"))
    );
    let (st, v) = anon.post("/api/v1/register", body("bob", &second)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn login_is_rate_limited_per_user_and_per_address() {
    let srv = TestServer::start(&["--auth-rate-per-user", "3", "--auth-rate-per-ip", "6"]);
    let anon = srv.anon();
    let attempt = |user: &'static str| {
        let anon = anon.clone();
        async move {
            let resp = anon
                .http
                .post(format!("{}/api/v1/login", anon.base))
                .json(&json!({"user": user, "password": "wrong-password", "device": "d"}))
                .send()
                .await
                .unwrap();
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            (resp.status(), retry)
        }
    };
    for _ in 0..3 {
        assert_eq!(attempt("mallory").await.0, StatusCode::UNAUTHORIZED);
    }
    let (st, retry) = attempt("mallory").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    assert!(retry.unwrap() >= 1);
    // Other names from the same address: the address budget (6) runs out.
    for _ in 0..3 {
        assert_eq!(attempt("trudy").await.0, StatusCode::UNAUTHORIZED);
    }
    let (st, retry) = attempt("eve").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    assert!(retry.is_some());
    // Register is limited by the same buckets.
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "eve", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
}

#[tokio::test]
async fn a_device_name_already_in_use_gets_the_first_free_suffix() {
    let srv = TestServer::start(&["--auth-rate-per-user", "100"]);
    let anon = srv.anon();
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "pat", "password": PASSWORD, "device": "laptop"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["device_name"], "laptop");
    let first = anon.with_token(v["token"].as_str().unwrap());
    let login = |user: &'static str, device: String| {
        let anon = anon.clone();
        async move {
            let (st, v) = anon
                .post(
                    "/api/v1/login",
                    json!({"user": user, "password": PASSWORD, "device": device}),
                )
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            (
                v["device_name"].as_str().unwrap().to_owned(),
                v["device_id"].as_str().unwrap().to_owned(),
            )
        }
    };
    let names = |api: crate::common::Api| async move {
        let (st, v) = api.get("/api/v1/devices").await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let mut names: Vec<String> = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };

    let (second, second_id) = login("pat", "laptop".into()).await;
    assert_eq!(second, "laptop-2");
    assert_eq!(login("pat", "laptop".into()).await.0, "laptop-3");
    assert_eq!(
        names(first.clone()).await,
        ["laptop", "laptop-2", "laptop-3"]
    );

    // A revoked device's name is free again.
    let (st, _) = first
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/devices/{second_id}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(login("pat", "laptop".into()).await.0, "laptop-2");
    assert_eq!(
        names(first.clone()).await,
        ["laptop", "laptop-2", "laptop-3"]
    );

    // A name that shows as one taken is taken: a zero-width space or a
    // trailing variation selector does not make a second "laptop".
    assert_eq!(
        login("pat", "lap\u{200B}top".into()).await.0,
        "lap\u{200B}top-4"
    );
    assert_eq!(
        login("pat", "laptop\u{FE0F}".into()).await.0,
        "laptop\u{FE0F}-5"
    );

    // Concurrent logins under one name never share it.
    let racing = tokio::join!(
        login("pat", "desk".into()),
        login("pat", "desk".into()),
        login("pat", "desk".into()),
        login("pat", "desk".into()),
    );
    let mut got = vec![racing.0.0, racing.1.0, racing.2.0, racing.3.0];
    got.sort();
    assert_eq!(got, ["desk", "desk-2", "desk-3", "desk-4"]);

    // Names are per account.
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "sam", "password": PASSWORD, "device": "laptop"}),
        )
        .await;
    assert_eq!(
        (st, v["device_name"].as_str()),
        (StatusCode::OK, Some("laptop"))
    );

    // The longest name stays within the limit: its base is shortened.
    let long = "a".repeat(evi_shared::limits::DEVICE_NAME_MAX_LEN);
    assert_eq!(login("pat", long.clone()).await.0, long);
    let (got, _) = login("pat", long.clone()).await;
    assert_eq!(got.len(), long.len());
    assert_eq!(got, format!("{}-2", &long[..long.len() - 2]));
}

#[tokio::test]
async fn user_names_that_differ_only_in_case_are_one_account() {
    let srv = TestServer::start(&[]);
    srv.register("alice").await;
    let anon = srv.anon();
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "Alice", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_exists")),
        "{v}"
    );
    // Any case logs in to it, and the answer names the account as registered.
    let (st, v) = anon
        .post(
            "/api/v1/login",
            json!({"user": "ALICE", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["user"], "alice");
    // Look-alikes from other scripts are no user names at all (Cyrillic а).
    let (st, v) = anon
        .post(
            "/api/v1/register",
            json!({"user": "\u{430}lice", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{v}"
    );
}
