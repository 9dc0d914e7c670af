//! What the operator sets with `evi-server admin` beside a running server,
//! kept in its database so that it holds at once and for every replica: a
//! quota per account, the invites (listed, expired, revoked) and the
//! registration mode (which `evi-server invite` then knows).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer, segment};

/// Runs `evi-server admin ARGS`, expecting it to fail: (exit code, stderr).
fn admin_fails(srv: &TestServer, args: &[&str]) -> (Option<i32>, String) {
    let out = srv.admin(args);
    assert!(!out.status.success(), "admin {args:?} succeeded");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `evi-server invite ARGS`: the code, and what it said on stderr.
fn invite(srv: &TestServer, args: &[&str]) -> (String, String) {
    let out = srv.invite_cmd().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "invite {args:?}: {err}");
    (
        String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        err,
    )
}

async fn register(srv: &TestServer, user: &str, code: Option<&str>) -> (StatusCode, Value) {
    srv.anon()
        .post(
            "/api/v1/register",
            json!({"user": user, "password": PASSWORD, "device": "d", "invite": code}),
        )
        .await
}

async fn push_one(a: &crate::common::Api, n: u64) -> (StatusCode, Value) {
    a.post(
        "/api/v1/records",
        json!({ "segments": [segment(n, n, 1000)] }),
    )
    .await
}

#[tokio::test]
async fn an_account_quota_holds_from_its_next_request_and_no_other_account_feels_it() {
    let srv = TestServer::start(&["--quota-bytes", "1000000"]);
    let alice = srv.register("alice").await;
    let bob = srv.register("bob").await;
    push_one(&alice, 1).await;
    let (_, st) = alice.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], 1_000_000, "{st}");
    let used = st["bytes_used"].as_u64().unwrap();

    // Room for one more such record, not two.
    let own = (used * 2 + used / 2).to_string();
    let set = srv.admin_json(&["quota", "alice", &own]);
    assert_eq!(
        set,
        json!({"user": "alice", "quota": {"bytes": own.parse::<u64>().unwrap(), "set_for": "account"}})
    );
    let (_, st) = alice.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"].to_string(), own, "{st}");
    assert_eq!(push_one(&alice, 2).await.0, StatusCode::OK);
    let (code, v) = push_one(&alice, 3).await;
    assert_eq!(
        (code, &v["code"]),
        (StatusCode::INSUFFICIENT_STORAGE, &json!("quota_exceeded")),
        "{v}"
    );
    // A blob is held to it too.
    let (code, v) = alice
        .put_blob(&crate::common::kid(4, 1), vec![7u8; 4000])
        .await;
    assert_eq!(code, StatusCode::INSUFFICIENT_STORAGE, "{v}");
    // Bob keeps the server's quota.
    for n in 1..=4 {
        assert_eq!(push_one(&bob, n).await.0, StatusCode::OK);
    }
    let (_, st) = bob.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], 1_000_000, "{st}");

    let list = srv.admin_json(&["accounts"]);
    let row = |user: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|a| a["user"] == user)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("alice")["quota"]["set_for"], "account");
    assert_eq!(row("bob")["quota"]["set_for"], "server");

    // None: past the server's quota too; then the server's again.
    srv.admin_json(&["quota", "alice", "none"]);
    let (_, st) = alice.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], Value::Null, "{st}");
    assert_eq!(push_one(&alice, 3).await.0, StatusCode::OK);
    srv.admin_json(&["quota", "alice", "default"]);
    let (_, st) = alice.get("/api/v1/status").await;
    assert_eq!(st["quota_bytes"], 1_000_000, "{st}");

    let (code, err) = admin_fails(&srv, &["quota", "carol", "5"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no account \"carol\""), "{err}");
    let (code, err) = admin_fails(&srv, &["quota", "alice", "lots"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("give a number of bytes, none, or default"),
        "{err}"
    );
}

#[tokio::test]
async fn invites_are_listed_and_an_expired_or_revoked_one_registers_nobody() {
    let srv = TestServer::start(&["--registration", "invite"]);
    let (first, err) = invite(&srv, &[]);
    assert!(err.contains("works until "), "{err}");
    let (second, _) = invite(&srv, &["--expires", "never"]);
    let (third, _) = invite(&srv, &["--expires", "48h"]);
    let list = srv.admin_json(&["invites"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(list.iter().all(|i| i["state"] == "unused"), "{list:?}");
    let never: Vec<_> = list.iter().filter(|i| i["expires_at"].is_null()).collect();
    assert_eq!(never.len(), 1, "{list:?}");
    // The list never shows a code.
    let shown = serde_json::to_string(list).unwrap();
    for code in [&first, &second, &third] {
        assert!(!shown.contains(code.as_str()), "{shown}");
    }

    assert_eq!(
        register(&srv, "alice", Some(&first)).await.0,
        StatusCode::OK
    );
    let list = srv.admin_json(&["invites"]);
    let used: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "used")
        .collect();
    assert_eq!(used.len(), 1, "{list}");
    assert_eq!(used[0]["used_by"], "alice");
    let used_id = used[0]["id"].as_str().unwrap().to_owned();

    // The others, by id: one expired now, one revoked.
    let id_of = |list: &Value, expires_null: bool| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|i| i["state"] == "unused" && i["expires_at"].is_null() == expires_null)
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let (never_id, dated_id) = (id_of(&list, true), id_of(&list, false));
    srv.admin_json(&["invite-expire", &never_id]);
    let (st, v) = register(&srv, "bob", Some(&second)).await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("invalid_invite")),
        "{v}"
    );
    srv.admin_json(&["invite-revoke", &dated_id[..6]]);
    let (st, v) = register(&srv, "bob", Some(&third)).await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("invalid_invite")),
        "{v}"
    );
    let list = srv.admin_json(&["invites"]);
    let states: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states.len(), 2, "{list}");
    assert!(states.contains(&"expired".to_owned()), "{list}");

    // A used invite stays as it was; an unknown id says where to look.
    let (code, err) = admin_fails(&srv, &["invite-revoke", &used_id]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("hint: `evi-server admin invites` lists them"),
        "{err}"
    );
    let (code, _) = admin_fails(&srv, &["invite-expire", "zz"]);
    assert_eq!(code, Some(1));

    // A code expired by the clock: issued already out of date is refused.
    let (late, _) = invite(&srv, &["--expires", "0m"]);
    let (st, _) = register(&srv, "carol", Some(&late)).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (fresh, _) = invite(&srv, &[]);
    assert_eq!(
        register(&srv, "carol", Some(&fresh)).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_registration_mode_lives_in_the_database_for_the_server_invite_and_admin() {
    let mut srv = TestServer::start(&["--registration", "invite"]);
    assert_eq!(
        srv.admin_json(&["registration"]),
        json!({"registration": "invite"})
    );

    // Closed by the operator, on the running server: at once.
    srv.admin_json(&["registration", "closed"]);
    let (_, caps) = srv.anon().get("/api/v1/capabilities").await;
    assert_eq!(caps["registration"], "closed", "{caps}");
    let (st, v) = register(&srv, "bob", None).await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("registration_closed")),
        "{v}"
    );
    let out = srv.invite_cmd().output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("evi-server: registration is closed")
            && err.contains(
                "hint: to admit users with codes: `evi-server admin registration invite`"
            ),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // Open: `invite` says nobody needs its code.
    srv.admin_json(&["registration", "open"]);
    let (_, err) = invite(&srv, &[]);
    assert!(err.starts_with("note: registration is open"), "{err}");
    assert_eq!(register(&srv, "bob", None).await.0, StatusCode::OK);

    // A start without --registration keeps what the database holds; a start
    // with it sets it.
    srv.stop();
    srv.set_flag("--registration", None);
    srv.start_again();
    let (_, caps) = srv.anon().get("/api/v1/capabilities").await;
    assert_eq!(caps["registration"], "open", "{caps}");
    srv.stop();
    srv.set_flag("--registration", Some("invite"));
    srv.start_again();
    let (_, caps) = srv.anon().get("/api/v1/capabilities").await;
    assert_eq!(caps["registration"], "invite", "{caps}");
    let (_, err) = invite(&srv, &[]);
    assert!(err.starts_with("one-time invite code for "), "{err}");
}

/// Metrics count accounts by class (recently seen, disabled, size, near
/// their quota) and never name one.
#[tokio::test]
async fn metrics_count_accounts_by_class_and_name_none() {
    let (srv, metrics) = TestServer::start_with_metrics(&[]);
    let full = srv.register("zq-full-account").await;
    let _quiet = srv.register("zq-quiet-account").await;
    let _gone = srv.register("zq-disabled-account").await;
    push_one(&full, 1).await;
    let (_, st) = full.get("/api/v1/status").await;
    let used = st["bytes_used"].as_u64().unwrap();
    srv.admin_json(&["quota", "zq-full-account", &(used + 10).to_string()]);
    srv.admin_json(&["disable", "zq-disabled-account"]);
    let text = crate::common::scrape(&metrics).await;
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(value("evi_server_accounts{class=\"seen_day\"}"), 2.0);
    assert_eq!(value("evi_server_accounts{class=\"disabled\"}"), 1.0);
    assert_eq!(value("evi_server_accounts{class=\"idle\"}"), 0.0);
    assert_eq!(
        value("evi_server_accounts_by_size{size=\"under_1mib\"}"),
        3.0
    );
    assert_eq!(value("evi_server_accounts_near_quota"), 1.0);
    assert_eq!(value("evi_server_accounts_with_own_quota"), 1.0);
    assert!(!text.contains("zq-"), "a name in the metrics:\n{text}");
}
