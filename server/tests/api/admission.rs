//! Push admission as a client meets it, on either backend (the rules are
//! `evi_server::store::push_plan`'s): in one push, a known record is
//! dropped, a forgotten stream's record refused, a record naming a deleted
//! blob refused with its stream's later ones, one past the quota refused
//! with its stream's later ones, and the rest stored under the next seqs,
//! none skipped. Ids a forget deletes are taken again later in the same
//! push, and a damaged row goes only if a record that stays holds its
//! entries.

use serde_json::{Value, json};

use crate::common::{TestServer, held, kid, missing_blobs_become, segment, tombstone};

/// A segment of `stream` holding entry `entry` that refers to blob `blob`.
fn naming(stream: u64, entry: u64, blob: &str) -> Value {
    let mut s = segment(stream, entry, 64);
    s["refs"] = json!([blob]);
    s
}

/// The seqs of the records after `after`.
async fn seqs_after(a: &crate::common::Api, after: u64) -> Vec<u64> {
    let (_, v) = a.get(&format!("/api/v1/records?after={after}")).await;
    let records = v["records"].as_array().unwrap();
    records.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn one_push_meets_every_rule_and_stores_the_rest_under_the_next_seqs() {
    let srv = TestServer::start(&["--quota-bytes", "100000"]);
    let a = srv.register("admission").await;
    // Blob x, named by stream 3 only, is deleted once stream 3 is forgotten;
    // stream 4 is forgotten too.
    let x = kid(9, 1);
    let (st, v) = a.put_blob(&x, b"age ciphertext".to_vec()).await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
    a.push(vec![segment(1, 1, 64), naming(3, 3, &x), segment(4, 4, 64)])
        .await;
    let v = a
        .push(vec![tombstone("forget", 3, 30), tombstone("forget", 4, 40)])
        .await;
    assert_eq!(v["stored"], 2, "{v}");
    assert_eq!(missing_blobs_become(&a, &[&x], &[&x]).await, json!([x]));
    let newest = v["newest_seq"].as_u64().unwrap();

    let batch = json!({"segments": [
        segment(1, 1, 64),        // known: dropped
        segment(4, 41, 64),       // its stream forgotten
        naming(5, 50, &x),        // names a deleted blob
        segment(5, 51, 64),       // waits behind it
        segment(6, 60, 150_000),  // past the quota
        segment(6, 61, 64),       // waits behind it
        segment(7, 70, 64),
        segment(2, 20, 64),
    ]});
    let (st, v) = a.post("/api/v1/records?per_item=true", batch).await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({
            "stored": 2,
            "dropped": 1,
            "newest_seq": newest + 2,
            "over_quota": [4, 5],
            "forgotten": [1],
            "blob_missing": [2, 3],
        })
    );
    assert_eq!(seqs_after(&a, newest).await, [newest + 1, newest + 2]);
    let streams: Vec<String> = held(&a).await.into_iter().map(|(s, _)| s).collect();
    assert_eq!(streams[streams.len() - 2..], [kid(1, 7), kid(1, 2)]);
}

/// A session forgotten, undone and sent again in one push (a device that
/// did all three offline): the ids the forget deleted are new again, so
/// the record is stored, not dropped as known and lost.
#[tokio::test]
async fn a_record_sent_again_after_its_forget_and_undo_in_one_push_is_stored() {
    let srv = TestServer::start(&[]);
    let a = srv.register("undone").await;
    a.push(vec![segment(1, 1, 64)]).await;
    let v = a
        .push(vec![
            tombstone("forget", 1, 10),
            tombstone("unforget", 1, 11),
            segment(1, 1, 64),
        ])
        .await;
    assert_eq!((&v["stored"], &v["dropped"]), (&json!(3), &json!(0)), "{v}");
    let kinds: Vec<String> = held(&a).await.into_iter().map(|(_, k)| k).collect();
    assert_eq!(kinds, ["forget", "unforget", "entries"]);
    let (_, known) = a
        .post("/api/v1/records/known", json!({"entry_ids": [kid(2, 1)]}))
        .await;
    assert_eq!(known["known"], json!([kid(2, 1)]));
    let (_, status) = a.get("/api/v1/status").await;
    assert_eq!(
        (&status["records"], &status["entries"]),
        (&json!(3), &json!(3))
    );
}

/// A forget of journal lines deletes the records holding them; the lines
/// kept from those records, sent again in the same push, are stored.
#[tokio::test]
async fn lines_kept_and_sent_again_with_their_forget_are_stored() {
    let srv = TestServer::start(&[]);
    let a = srv.register("lines").await;
    let mut both = segment(1, 1, 64);
    both["entry_ids"] = json!([kid(2, 1), kid(2, 2)]);
    a.push(vec![both]).await;
    let mut forget = segment(1, 5, 32);
    forget["kind"] = json!("forget-lines");
    forget["entry_ids"] = json!([kid(3, 5)]);
    forget["forgets"] = json!([kid(2, 1)]);
    let v = a.push(vec![forget, segment(1, 2, 64)]).await;
    assert_eq!((&v["stored"], &v["dropped"]), (&json!(2), &json!(0)), "{v}");
    let kinds: Vec<String> = held(&a).await.into_iter().map(|(_, k)| k).collect();
    assert_eq!(kinds, ["forget-lines", "entries"]);
    let (_, known) = a
        .post(
            "/api/v1/records/known",
            json!({"entry_ids": [kid(2, 1), kid(2, 2)]}),
        )
        .await;
    assert_eq!(
        known["known"],
        json!([kid(2, 2)]),
        "the forgotten line is gone"
    );
}

/// Forgets run before damaged rows are dropped: a damaged row whose entry
/// a record of this push holds stays when that record is forgotten in the
/// same push, since nothing then holds the entry.
#[tokio::test]
async fn a_damaged_row_stays_when_its_replacement_is_forgotten_in_the_same_push() {
    let srv = TestServer::start(&[]);
    let a = srv.register("damaged-forgotten").await;
    a.push(vec![segment(1, 1, 40)]).await;
    let (_, v) = a
        .post("/api/v1/records/damaged", json!({"seqs": [1]}))
        .await;
    assert_eq!(v, json!({"marked": 1}));
    let v = a
        .push(vec![segment(2, 1, 40), tombstone("forget", 2, 9)])
        .await;
    assert_eq!(v["stored"], 2, "{v}");
    assert_eq!(
        held(&a).await,
        [
            (kid(1, 1), "entries".to_owned()),
            (kid(1, 2), "forget".to_owned())
        ],
        "the damaged row stays, still marked"
    );
    let (_, known) = a
        .post("/api/v1/records/known", json!({"entry_ids": [kid(2, 1)]}))
        .await;
    assert_eq!(known["known"], json!([]));
    // Sent again, in a record that stays: now the damaged row goes.
    assert_eq!(a.push(vec![segment(3, 1, 40)]).await["stored"], 1);
    let streams: Vec<String> = held(&a).await.into_iter().map(|(s, _)| s).collect();
    assert_eq!(streams, [kid(1, 2), kid(1, 3)]);
}
