//! Calls that change an account's history or key (a forget or its undo, a
//! damage report, a rotation's begin and commit, a device made by pairing)
//! need proof of the account's key in the `evi-key-proof` header once the
//! account holds a proof hash: a device token alone (a stolen one) is
//! refused with 403 `key_proof_required` and changes nothing. Before, a
//! token alone could begin a rotation that blocked the owner's, and undo a
//! forget (an `unforget` then the old records again, or a damage report
//! then other records under the same ids).

use base64::Engine as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{Api, PASSWORD, TestServer, held, kid, segment, tombstone};

/// A key's proof as the header carries it, and its hash as the server keeps it.
struct Key {
    proof: String,
    hash: String,
    check: String,
}

impl Key {
    fn new(tag: u8) -> Self {
        let proof = [tag; 32];
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Self {
            proof: hex::encode(proof),
            hash: b64(&Sha256::digest(proof)),
            check: b64(&[tag ^ 0x5a; 32]),
        }
    }
}

/// `method path` with `body` (JSON) and, if given, the key proof header.
async fn call(
    api: &Api,
    method: Method,
    path: &str,
    body: Value,
    proof: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = api
        .http
        .request(method, format!("{}{path}", api.base))
        .bearer_auth(api.token.as_deref().unwrap())
        .json(&body);
    if let Some(p) = proof {
        req = req.header("evi-key-proof", p);
    }
    let resp = req.send().await.unwrap();
    let st = resp.status();
    (st, resp.json().await.unwrap_or(Value::Null))
}

async fn post(api: &Api, path: &str, body: Value, proof: Option<&str>) -> (StatusCode, Value) {
    call(api, Method::POST, path, body, proof).await
}

/// Refused for want of the key: 403 `key_proof_required`.
fn needs_the_key((st, v): (StatusCode, Value)) {
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::FORBIDDEN, &json!("key_proof_required")),
        "{v}"
    );
}

/// Stores `key`'s check value and proof hash, as a device of it does.
async fn set_key(api: &Api, key: &Key, password: Option<&str>) -> (StatusCode, Value) {
    let mut body = json!({"key_check": key.check, "key_proof_hash": key.hash});
    if let Some(p) = password {
        body["password"] = json!(p);
    }
    call(api, Method::PUT, "/api/v1/key-check", body, None).await
}

/// Another device of `user`, logged in with the password: its token.
async fn another_device(srv: &TestServer, user: &str, name: &str) -> Api {
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": name}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    srv.anon().with_token(v["token"].as_str().unwrap())
}

#[tokio::test]
async fn a_token_without_the_key_cannot_undo_a_forget() {
    let srv = TestServer::start(&[]);
    let owner = srv.register("forgetting").await;
    let key = Key::new(1);
    assert_eq!(set_key(&owner, &key, None).await.0, StatusCode::OK);
    let (_, v) = owner.get("/api/v1/key-check").await;
    assert_eq!(v["key_proof"], true, "{v}");
    let old = segment(1, 1, 64);
    owner.push(vec![old.clone(), segment(2, 2, 64)]).await;

    // The owner forgets stream 1: without the key's proof that is refused
    // too, and nothing is deleted.
    let forget = json!({"segments": [tombstone("forget", 1, 10)]});
    needs_the_key(post(&owner, "/api/v1/records", forget.clone(), None).await);
    assert_eq!(held(&owner).await.len(), 2);
    let (st, v) = post(&owner, "/api/v1/records", forget, Some(&key.proof)).await;
    assert_eq!((st, &v["stored"]), (StatusCode::OK, &json!(1)), "{v}");

    // A stolen token of another device: the undo, a forget of another
    // stream, forgotten lines and a damage report are all refused, with a
    // made-up proof as without one.
    let thief = another_device(&srv, "forgetting", "stolen").await;
    let made_up = "ab".repeat(32);
    for proof in [None, Some(made_up.as_str())] {
        for segs in [
            json!([tombstone("unforget", 1, 11)]),
            json!([segment(2, 3, 64), tombstone("forget", 2, 12)]),
            json!([{
                "stream": kid(1, 2), "kind": "forget-lines", "entry_ids": [kid(3, 13)],
                "ciphertext": "AAAA", "forgets": [kid(2, 2)]
            }]),
        ] {
            needs_the_key(post(&thief, "/api/v1/records", json!({"segments": segs}), proof).await);
        }
        needs_the_key(
            post(
                &thief,
                "/api/v1/records/damaged",
                json!({"seqs": [1, 2, 3]}),
                proof,
            )
            .await,
        );
    }
    // Replaying the forgotten record is refused as before (the stream is
    // forgotten); what the account holds is what the owner left.
    let (st, v) = post(&thief, "/api/v1/records", json!({"segments": [old]}), None).await;
    assert_eq!((st, &v["forgotten"]), (StatusCode::OK, &json!([0])), "{v}");
    assert_eq!(
        held(&owner).await,
        vec![
            (kid(1, 2), "entries".to_owned()),
            (kid(1, 1), "forget".to_owned())
        ]
    );
    // Adding records is what a token is for.
    let v = thief.push(vec![segment(4, 4, 64)]).await;
    assert_eq!(v["stored"], 1, "{v}");
    // The key's holder marks and undoes as always.
    let (st, v) = post(
        &owner,
        "/api/v1/records/damaged",
        json!({"seqs": [1]}),
        Some(&key.proof),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let undo = json!({"segments": [tombstone("unforget", 1, 11)]});
    let (st, v) = post(&owner, "/api/v1/records", undo, Some(&key.proof)).await;
    assert_eq!((st, &v["stored"]), (StatusCode::OK, &json!(1)), "{v}");
}

#[tokio::test]
async fn a_token_without_the_key_cannot_begin_or_commit_a_rotation_nor_mint_a_device() {
    let srv = TestServer::start(&[]);
    let owner = srv.register("rotating").await;
    let key = Key::new(2);
    assert_eq!(set_key(&owner, &key, None).await.0, StatusCode::OK);
    owner.push(vec![segment(1, 1, 64)]).await;
    let thief = another_device(&srv, "rotating", "stolen").await;

    // The thief's begin (which before this held the owner's rotation off
    // with 409 for good) is refused, and stages nothing.
    let theirs = Key::new(3);
    let begin = |k: &Key| json!({"key_check": k.check, "key_proof_hash": k.hash});
    needs_the_key(post(&thief, "/api/v1/rotation", begin(&theirs), None).await);
    needs_the_key(
        post(
            &thief,
            "/api/v1/rotation",
            begin(&theirs),
            Some(&theirs.proof),
        )
        .await,
    );
    needs_the_key(
        post(
            &thief,
            "/api/v1/rotation/commit",
            json!({"through_seq": 1}),
            None,
        )
        .await,
    );

    // The owner's rotation: nothing to abandon; its staging account holds
    // the new key's proof hash, and after the commit the account does.
    let new = Key::new(4);
    let (st, v) = post(&owner, "/api/v1/rotation", begin(&new), Some(&key.proof)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["fresh"], &v["abandoned"]),
        (&json!(true), &json!(false)),
        "{v}"
    );
    let staging = srv.anon().with_token(v["token"].as_str().unwrap());
    let (_, v) = staging.get("/api/v1/key-check").await;
    assert_eq!(
        (&v["key_check"], &v["key_proof"]),
        (&json!(new.check), &json!(true)),
        "{v}"
    );
    staging.push(vec![segment(9, 1, 64)]).await;
    needs_the_key(
        post(
            &owner,
            "/api/v1/rotation/commit",
            json!({"through_seq": 1}),
            None,
        )
        .await,
    );
    let (st, v) = post(
        &owner,
        "/api/v1/rotation/commit",
        json!({"through_seq": 1}),
        Some(&key.proof),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // The rotating device is the account's now, on the new key: the old
    // key's proof no longer forgets anything; the new one's does.
    let forget = json!({"segments": [tombstone("forget", 9, 10)]});
    needs_the_key(post(&owner, "/api/v1/records", forget.clone(), Some(&key.proof)).await);
    let (st, v) = post(&owner, "/api/v1/records", forget, Some(&new.proof)).await;
    assert_eq!((st, &v["stored"]), (StatusCode::OK, &json!(1)), "{v}");

    // A pairing slot a token opens makes a device only for the key's holder.
    let (st, v) = owner.post("/api/v1/pair", json!({"offer": "AQ=="})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let slot = v["slot"].as_u64().unwrap();
    let (st, v) = srv
        .anon()
        .post(
            &format!("/api/v1/pair/{slot}/join"),
            json!({"hello": "Ag=="}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let path = format!("/api/v1/pair/{slot}/device");
    needs_the_key(post(&owner, &path, json!({"device": "phone"}), None).await);
    let (_, v) = owner.get("/api/v1/devices").await;
    assert!(!v.to_string().contains("phone"), "{v}");
    let (st, v) = post(&owner, &path, json!({"device": "phone"}), Some(&new.proof)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_key_proof_is_set_once_and_replaced_only_with_the_password() {
    let srv = TestServer::start(&[]);
    let owner = srv.register("proving").await;
    // An account from before proofs takes a token's word, as before.
    let (_, v) = owner.get("/api/v1/key-check").await;
    assert_eq!(v["key_proof"], false, "{v}");
    let legacy = json!({"segments": [tombstone("forget", 1, 1)]});
    let (st, v) = post(&owner, "/api/v1/records", legacy, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");

    let mine = Key::new(5);
    let (st, v) = set_key(&owner, &mine, None).await;
    assert_eq!((st, &v["key_proof"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(
        set_key(&owner, &mine, None).await.0,
        StatusCode::OK,
        "the same again"
    );
    // Another proof under the same check value (a token's holder claiming
    // the key): refused, and with a wrong password too.
    let other = Key {
        check: mine.check.clone(),
        ..Key::new(6)
    };
    let (st, v) = set_key(&owner, &other, None).await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::CONFLICT, &json!("key_proof_mismatch")),
        "{v}"
    );
    let (st, v) = set_key(&owner, &other, Some("not the password")).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
    let undo = json!({"segments": [tombstone("unforget", 1, 2)]});
    needs_the_key(post(&owner, "/api/v1/records", undo.clone(), Some(&other.proof)).await);
    // The password replaces it (what `evi sync login` does).
    let (st, v) = set_key(&owner, &other, Some(PASSWORD)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    needs_the_key(post(&owner, "/api/v1/records", undo.clone(), Some(&mine.proof)).await);
    let (st, _) = post(&owner, "/api/v1/records", undo, Some(&other.proof)).await;
    assert_eq!(st, StatusCode::OK);
    // A hash that is not a SHA-256 is refused as such.
    let (st, v) = call(
        &owner,
        Method::PUT,
        "/api/v1/key-check",
        json!({"key_check": mine.check, "key_proof_hash": "AAEC"}),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}
