//! The key proof as devices use it (see `server/src/keyproof.rs`): a device
//! that holds the key sends its proof where the server asks for it, so
//! forgets, their undo and rotations work as before, while a device token
//! alone (one copied off a device, without the key) cannot undo a forget.
//! An account from before proofs gets its key's proof from the first of
//! its devices that syncs, and `evi sync login` with the password replaces
//! a proof set by anyone else.

use serde_json::{Value, json};

use crate::common::{Device, TestServer, sessions, two_devices};
use crate::forget::stream_records;

const DAY: &str = "2026-03-14";
const GONE: &str = "forget-proof-0001";

fn line(text: &str) -> String {
    format!("{{\"role\":\"user\",\"ts\":\"{DAY}T09:00:00Z\",\"content\":\"{text}\"}}\n")
}

/// Sets every account's key proof hash behind the server's back, on
/// either backend: none, or 32 bytes of `byte`.
fn set_proof_hash(server: &TestServer, byte: Option<u8>) {
    let hex = byte.map(|b| format!("{b:02x}").repeat(32));
    match &server.db {
        Some(db) => {
            let v = hex.map_or("NULL".to_owned(), |h| format!("'\\x{h}'::bytea"));
            crate::pg_db::query(&db.url, &format!("UPDATE users SET key_proof_hash = {v}"));
        }
        None => {
            let v = hex.map_or("NULL".to_owned(), |h| format!("X'{h}'"));
            rusqlite::Connection::open(server.data.path().join("evi-server.sqlite3"))
                .unwrap()
                .execute_batch(&format!("UPDATE users SET key_proof_hash = {v}"))
                .unwrap();
        }
    }
}

/// `POST /api/v1/records` of `segments` with `token` and no key proof.
fn push_with_token_only(server: &TestServer, token: &str, segments: Value) -> (u16, Value) {
    let resp = crate::common::http()
        .post(format!("{}/api/v1/records", server.url))
        .bearer_auth(token)
        .json(&json!({ "segments": segments }))
        .send()
        .unwrap();
    let st = resp.status().as_u16();
    (st, resp.json().unwrap_or(Value::Null))
}

fn key_proof_held(server: &TestServer, dev: &Device) -> bool {
    server.get_json(&dev.token(), "key-check")["key_proof"] == true
}

#[test]
fn devices_prove_the_key_and_a_token_alone_cannot_undo_a_forget() {
    let (server, a, b) = two_devices();
    assert!(key_proof_held(&server, &a), "init sets the key's proof");
    a.write(DAY, GONE, line("to be forgotten").as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    assert!(sessions(&b).contains(GONE));
    let before = stream_records(&server, &a, GONE);

    let run = a.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let tombstone = stream_records(&server, &a, GONE);
    assert_eq!(tombstone.len(), 1, "{tombstone:?}");
    assert_eq!(tombstone[0]["kind"], "forget");

    // B's token, taken without B's key: an undo and a replay of the old
    // records. The undo is refused for want of the key; the replay is
    // refused as the forgotten stream's.
    let mut undo = tombstone[0].clone();
    undo["kind"] = json!("unforget");
    let (st, v) = push_with_token_only(&server, &b.token(), json!([undo]));
    assert_eq!((st, &v["code"]), (403, &json!("key_proof_required")), "{v}");
    let replay: Vec<Value> = before
        .iter()
        .map(|r| {
            json!({"stream": r["stream"], "kind": r["kind"], "entry_ids": r["entry_ids"],
                   "ciphertext": r["ciphertext"]})
        })
        .collect();
    let (st, v) = push_with_token_only(&server, &b.token(), json!(replay));
    assert_eq!((st, &v["stored"]), (200, &json!(0)), "{v}");
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "pat", "phone");
    c.sync_ok(&["pull"]);
    assert!(
        !sessions(&c).contains(GONE),
        "a new device got the forgotten session back"
    );

    // B, which holds the key, undoes it as any device of the account can.
    b.sync_ok(&["pull"]);
    let run = b.evi(&["sessions", "forget", "--undo", GONE, "--json"]);
    assert_eq!(run.code, 0, "undo: {}", run.stderr);
    c.sync_ok(&["pull"]);
    assert!(sessions(&c).contains(GONE));
}

#[test]
fn an_account_from_before_proofs_gets_its_keys_and_login_replaces_anothers() {
    let (server, a, b) = two_devices();
    // As a server upgraded under an account made before proofs holds it.
    set_proof_hash(&server, None);
    assert!(!key_proof_held(&server, &a));
    a.write(DAY, GONE, line("kept").as_bytes());
    a.sync_ok(&["push"]);
    assert!(
        key_proof_held(&server, &a),
        "the first sync set the key's proof"
    );

    // Someone holding only a token got there first with a proof of their
    // own: forgets from the key's holders are refused, and say what to do.
    set_proof_hash(&server, Some(0xee));
    b.sync_ok(&["pull"]);
    // The forget is done on the device; the server is not told, and the
    // push that would tell it fails with what to do.
    let run = b.evi(&["sessions", "forget", "--yes", GONE, "--json"]);
    assert_eq!(run.code, 0, "forget: {}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["sent"], false, "{v}");
    assert!(
        run.stderr.contains("proof of the account's key"),
        "{}",
        run.stderr
    );
    let push = b.sync(&["sync", "push"]);
    assert_ne!(push.code, 0, "a forget went through under another proof");
    assert!(push.stderr.contains("evi sync login"), "{}", push.stderr);
    assert_eq!(
        stream_records(&server, &a, GONE)[0]["kind"],
        "entries",
        "nothing was forgotten"
    );
    // `evi sync login` with the password puts the key's proof back, and
    // the push tells the server.
    b.sync_ok(&["login", "--server", &server.url, "--user", "pat"]);
    b.sync_ok(&["push"]);
    let records = stream_records(&server, &a, GONE);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["kind"], "forget");
}
