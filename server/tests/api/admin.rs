//! `evi-server admin`, run beside the running server on its data folder,
//! database and store: the account list, disable and enable (refused at
//! once, data kept), and delete, after which no byte the account stored is
//! left in the database, the data folder or the bucket.

use base64::Engine as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer, kid, segment};

fn account<'a>(list: &'a Value, user: &str) -> Option<&'a Value> {
    list.as_array().unwrap().iter().find(|a| a["user"] == user)
}

async fn login(srv: &TestServer, user: &str) -> (StatusCode, Value) {
    srv.anon()
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": "again"}),
        )
        .await
}

#[tokio::test]
async fn the_operator_lists_disables_and_deletes_an_account_and_no_byte_of_it_is_left() {
    let srv = TestServer::start(&[]);
    let alice = srv.register("alice").await;
    let bob = srv.register("bob").await;
    // What alice stores carries canaries: a record body, a blob, and the
    // keyed ids of both.
    let body = b"alice-record-canary-3f9c1d".repeat(20);
    let mut seg = segment(1, 1, 0);
    seg["ciphertext"] = json!(base64::engine::general_purpose::STANDARD.encode(&body));
    let entry = seg["entry_ids"][0].as_str().unwrap().to_owned();
    alice.push(vec![seg]).await;
    let blob_name = kid(4, 77);
    let blob = b"alice-blob-canary-8e2a47".repeat(40);
    let (st, v) = alice.put_blob(&blob_name, blob.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    bob.push(vec![segment(2, 2, 64)]).await;

    let list = srv.admin_json(&["accounts"]);
    let a = account(&list, "alice").expect("alice is listed");
    assert_eq!(
        (&a["devices"], &a["records"], &a["blobs"], &a["disabled"]),
        (&json!(1), &json!(1), &json!(1), &json!(false)),
        "{a}"
    );
    assert!(a["bytes_used"].as_u64().unwrap() > (body.len() + blob.len()) as u64);
    assert!(account(&list, "bob").is_some(), "{list}");

    // Disabled: every call of its devices and its logins are refused, at
    // once, and said so; another account is not touched.
    srv.admin_json(&["disable", "alice"]);
    let (st, v) = alice.get("/api/v1/status").await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("account_disabled")),
        "{v}"
    );
    let (st, v) = login(&srv, "alice").await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("account_disabled")),
        "{v}"
    );
    assert_eq!(bob.get("/api/v1/status").await.0, StatusCode::OK);
    let list = srv.admin_json(&["accounts"]);
    assert_eq!(account(&list, "alice").unwrap()["disabled"], true);
    // Enabled again: its data is all there.
    srv.admin_json(&["enable", "alice"]);
    let (records, _) = alice.pull_all(None).await;
    assert_eq!(records.len(), 1);

    // Without a terminal a delete asks for --yes and deletes nothing.
    let out = srv.admin(&["delete", "alice"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    assert_eq!(alice.get("/api/v1/status").await.0, StatusCode::OK);
    let unknown = srv.admin(&["delete", "nobody", "--yes"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no account \"nobody\""));

    let v = srv.admin_json(&["delete", "alice", "--yes"]);
    assert_eq!(v["deleted"]["user"], "alice", "{v}");
    assert_eq!(
        alice.get("/api/v1/status").await.0,
        StatusCode::UNAUTHORIZED
    );
    let list = srv.admin_json(&["accounts"]);
    assert!(account(&list, "alice").is_none(), "{list}");
    // No byte of it anywhere the server keeps anything; bob's is there.
    let needles: [(&str, Vec<u8>); 4] = [
        ("the record body", body[..26].to_vec()),
        ("the blob", blob[..24].to_vec()),
        ("the entry id", hex::decode(&entry).unwrap()),
        ("the blob's name", blob_name.clone().into_bytes()),
    ];
    for (place, bytes) in srv.stored_bytes() {
        for (what, needle) in &needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{what} is still in {place}"
            );
        }
    }
    assert_eq!(srv.body_rows().len(), 1, "bob's record stays");
    let (records, _) = bob.pull_all(None).await;
    assert_eq!(records.len(), 1);
    // The name is free again.
    srv.register("alice").await;
}
