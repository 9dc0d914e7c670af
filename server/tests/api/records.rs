//! Push and pull: idempotent retries, pagination at boundaries, isolation,
//! id validation, 413 and 507.

use std::collections::BTreeSet;

use evi_server::store::record_cost;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{TestServer, kid, missing_blobs_become, segment};

#[tokio::test]
async fn a_retried_batch_adds_nothing() {
    let srv = TestServer::start(&[]);
    let a = srv.register("retry").await;
    let batch: Vec<_> = (0..5).map(|i| segment(1, i, 20)).collect();
    let v = a.push(batch.clone()).await;
    assert_eq!(
        (
            v["stored"].as_u64(),
            v["dropped"].as_u64(),
            v["newest_seq"].as_u64()
        ),
        (Some(5), Some(0), Some(5))
    );
    let v = a.push(batch.clone()).await;
    assert_eq!(
        (
            v["stored"].as_u64(),
            v["dropped"].as_u64(),
            v["newest_seq"].as_u64()
        ),
        (Some(0), Some(5), Some(5))
    );
    // Duplicates inside one batch merge too.
    let v = a.push(vec![segment(1, 9, 5), segment(1, 9, 5)]).await;
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(1), Some(1))
    );
    // A segment with one new entry id among known ones is stored.
    let mut mixed = segment(1, 0, 5);
    mixed["entry_ids"] = json!([kid(2, 0), kid(2, 100)]);
    assert_eq!(a.push(vec![mixed]).await["stored"], 1);
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(st["records"], 7);
    assert_eq!(st["entries"], 7);
    assert_eq!(st["newest_seq"], 7);
    // Six records of one entry id, one of two.
    assert_eq!(
        st["bytes_used"],
        5 * 20 + 5 + 5 + 6 * record_cost(0, 1) + record_cost(0, 2)
    );
    let (all, _) = a.pull_all(None).await;
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    // Stored as sent, with the seq and the pushing device added.
    let (_, devices) = a.get("/api/v1/devices").await;
    let device = devices["devices"][0]["id"].clone();
    assert_eq!(all[0], {
        let mut r = segment(1, 0, 20);
        r["seq"] = json!(1);
        r["device"] = device;
        r
    });
}

async fn check_pages(
    srv: &TestServer,
    user: &str,
    n: u64,
    len: usize,
    limit: Option<u32>,
    pages: usize,
) {
    let a = srv.register(user).await;
    let segs: Vec<_> = (0..n).map(|i| segment(3, i, len)).collect();
    assert_eq!(a.push(segs).await["stored"], n);
    let (all, got_pages) = a.pull_all(limit).await;
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<_>>(),
        "{user}: every record exactly once, in order"
    );
    let ids: BTreeSet<_> = all
        .iter()
        .map(|r| r["entry_ids"][0].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len() as u64, n);
    assert_eq!(got_pages, pages, "{user}: page count");
}

#[tokio::test]
async fn pagination_at_page_size_boundaries() {
    // Count-bounded pages of 5 (client limit) and byte-bounded pages of 3
    // records. The page counts what it sends: a record of 100 bytes of
    // ciphertext is about 372 bytes of JSON (ids, head, base64), one of 10
    // about 252, and the page's own fields about 61; so 1400 bytes hold 3
    // of the first (not 4) and 5 of the second.
    let srv = TestServer::start(&["--max-page-bytes", "1400"]);
    check_pages(&srv, "c9", 9, 10, Some(5), 2).await;
    check_pages(&srv, "c10", 10, 10, Some(5), 2).await;
    check_pages(&srv, "c11", 11, 10, Some(5), 3).await;
    check_pages(&srv, "b8", 8, 100, None, 3).await;
    check_pages(&srv, "b9", 9, 100, None, 3).await;
    check_pages(&srv, "b10", 10, 100, None, 4).await;
    // A record larger than a page still comes, alone.
    check_pages(&srv, "big", 2, 1000, None, 2).await;

    // An empty account and a cursor past the end.
    let a = srv.register("empty").await;
    let (_, v) = a.get("/api/v1/records?after=0").await;
    assert_eq!(v, json!({"records": [], "next_after": 0, "more": false}));
    let (_, v) = a.get("/api/v1/records?after=42").await;
    assert_eq!(v["next_after"], 42);
    let (st, _) = a.get("/api/v1/records?after=-1").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn users_cannot_read_or_detect_each_other() {
    let srv = TestServer::start(&[]);
    let a = srv.register("usera").await;
    let b = srv.register("userb").await;
    a.push(vec![segment(1, 1, 10), segment(1, 2, 10)]).await;
    let name = kid(7, 1);
    assert_eq!(
        a.put_blob(&name, b"secret of A".to_vec()).await.0,
        StatusCode::CREATED
    );

    let (all, _) = b.pull_all(None).await;
    assert!(all.is_empty());
    let (_, st) = b.get("/api/v1/status").await;
    assert_eq!(
        (
            st["records"].as_u64(),
            st["blobs"].as_u64(),
            st["bytes_used"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
    let (_, v) = b
        .post("/api/v1/blobs/missing", json!({"names": [name]}))
        .await;
    assert_eq!(v["missing"], json!([name]));
    assert_eq!(b.get_blob(&name).await.0, StatusCode::NOT_FOUND);
    let (_, v) = b
        .post("/api/v1/blobs/purge", json!({"names": [name]}))
        .await;
    assert_eq!(v["purged"], 0);
    // B pushing the same entry ids stores B's own records.
    assert_eq!(b.push(vec![segment(1, 1, 10)]).await["stored"], 1);
    // B's upload under the same name does not touch A's blob.
    assert_eq!(
        b.put_blob(&name, b"B".to_vec()).await.0,
        StatusCode::CREATED
    );
    assert_eq!(a.get_blob(&name).await.1, b"secret of A");
    assert_eq!(b.get_blob(&name).await.1, b"B");
    // Nor can B revoke A's devices.
    let (_, devs) = a.get("/api/v1/devices").await;
    let a_dev = devs["devices"][0]["id"].as_str().unwrap();
    let (st, _) = b
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/devices/{a_dev}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(a.get("/api/v1/status").await.0, StatusCode::OK);
}

#[tokio::test]
async fn malformed_ids_and_bodies_are_400() {
    let srv = TestServer::start(&[]);
    let a = srv.register("ids").await;
    let good = kid(1, 1);
    let bad_ids = [
        "../../x".to_owned(),
        "..%2F..%2Fx".to_owned(),
        good.to_uppercase(),
        good[..63].to_owned(),
        format!("{good}0"),
        String::new(),
    ];
    for bad in &bad_ids {
        for field in ["stream", "entry"] {
            let mut s = segment(1, 1, 4);
            if field == "stream" {
                s["stream"] = json!(bad);
            } else {
                s["entry_ids"] = json!([good, bad]);
            }
            let (st, v) = a.post("/api/v1/records", json!({"segments": [s]})).await;
            assert_eq!(
                (st, v["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("invalid_id")),
                "{field} {bad:?}"
            );
        }
    }
    let mut s = segment(1, 1, 4);
    s["entry_ids"] = json!([]);
    assert_eq!(
        a.post("/api/v1/records", json!({"segments": [s]})).await.0,
        StatusCode::BAD_REQUEST
    );
    let mut s = segment(1, 1, 4);
    s["kind"] = json!("../x");
    assert_eq!(
        a.post("/api/v1/records", json!({"segments": [s]})).await.0,
        StatusCode::BAD_REQUEST
    );
    let (st, v) = a.post("/api/v1/records", json!({"nope": 1})).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    assert_eq!(a.get("/api/v1/status").await.1["records"], 0);
}

#[tokio::test]
async fn oversized_batch_is_413_and_quota_is_507_with_nothing_stored() {
    // Room for a record of 600 bytes and one of 300, not of 600 and 600.
    let quota = record_cost(600, 1) + record_cost(300, 1) + 10;
    let srv = TestServer::start(&[
        "--max-batch-bytes",
        "65536",
        "--quota-bytes",
        &quota.to_string(),
    ]);
    let a = srv.register("limits").await;
    let (st, v) = a
        .post(
            "/api/v1/records",
            json!({"segments": [segment(1, 1, 60_000)]}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );

    a.push(vec![segment(1, 1, 600)]).await;
    let (st, v) = a
        .post(
            "/api/v1/records",
            json!({"segments": [segment(1, 2, 100), segment(1, 3, 500)]}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::INSUFFICIENT_STORAGE, Some("quota_exceeded"))
    );
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(
        (
            st["records"].as_u64(),
            st["bytes_used"].as_u64(),
            st["quota_bytes"].as_u64()
        ),
        (Some(1), Some(record_cost(600, 1)), Some(quota))
    );
    // A blob past the quota is refused and leaves nothing.
    let name = kid(5, 5);
    assert_eq!(
        a.put_blob(&name, vec![1; 600]).await.0,
        StatusCode::INSUFFICIENT_STORAGE
    );
    let (_, v) = a
        .post("/api/v1/blobs/missing", json!({"names": [name]}))
        .await;
    assert_eq!(v["missing"], json!([name]));
    // What still fits goes in.
    assert_eq!(a.push(vec![segment(1, 4, 300)]).await["stored"], 1);
}

#[tokio::test]
async fn known_answers_which_entry_ids_this_user_holds() {
    let srv = TestServer::start(&[]);
    let a = srv.register("known").await;
    let b = srv.register("other").await;
    let mut seg = segment(1, 0, 20);
    seg["entry_ids"] = json!([kid(2, 0), kid(2, 1)]);
    a.push(vec![seg]).await;
    let asked = json!({ "entry_ids": [kid(2, 9), kid(2, 1), kid(2, 0)] });
    let (st, v) = a.post("/api/v1/records/known", asked.clone()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({ "known": [kid(2, 1), kid(2, 0)] }),
        "in the order asked"
    );
    // Another user's ids are not this user's.
    let (_, v) = b.post("/api/v1/records/known", asked).await;
    assert_eq!(v, json!({ "known": [] }));
    // Bounded like the blob calls; malformed ids are refused.
    let many: Vec<String> = (0..10_001).map(|n| kid(3, n)).collect();
    let (st, v) = a
        .post("/api/v1/records/known", json!({ "entry_ids": many }))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, _) = a
        .post("/api/v1/records/known", json!({ "entry_ids": ["nope"] }))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, _) = srv
        .anon()
        .post("/api/v1/records/known", json!({ "entry_ids": [] }))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

/// Issue 20, defect 3: a record reported damaged no longer holds its
/// entries, so a push carrying them again is stored (not dropped as a
/// duplicate), and the marked row goes once that record holds them all;
/// the usage counts follow. Another user cannot mark this user's records.
#[tokio::test]
async fn damaged_record_is_replaced_by_a_push_of_its_entries() {
    let srv = TestServer::start(&[]);
    let a = srv.register("damaged").await;
    let b = srv.register("stranger").await;
    let mut seg = segment(1, 0, 40);
    seg["entry_ids"] = json!([kid(2, 0), kid(2, 1)]);
    a.push(vec![seg.clone(), segment(1, 5, 30)]).await;
    let ids = json!({ "entry_ids": [kid(2, 0), kid(2, 1)] });
    // Sent again unmarked: a duplicate, dropped.
    assert_eq!(a.push(vec![seg.clone()]).await["stored"], 0);

    let (st, v) = b
        .post("/api/v1/records/damaged", json!({"seqs": [1]}))
        .await;
    assert_eq!((st, &v), (StatusCode::OK, &json!({"marked": 0})));
    let (_, v) = a.post("/api/v1/records/known", ids.clone()).await;
    assert_eq!(v["known"].as_array().unwrap().len(), 2, "{v}");

    let (st, v) = a
        .post("/api/v1/records/damaged", json!({"seqs": [1, 77]}))
        .await;
    assert_eq!((st, &v), (StatusCode::OK, &json!({"marked": 1})));
    let (_, v) = a.post("/api/v1/records/known", ids).await;
    assert_eq!(v, json!({"known": []}), "its entries count as lacking");
    assert_eq!(a.push(vec![seg]).await["stored"], 1, "sent again: stored");
    let (records, _) = a.pull_all(None).await;
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        vec![2, 3],
        "the damaged row went, its replacement came"
    );
    let (_, v) = a.get("/api/v1/status").await;
    assert_eq!(
        (&v["records"], &v["entries"], &v["bytes_used"]),
        (
            &json!(2),
            &json!(3),
            &json!(record_cost(30, 1) + record_cost(40, 2))
        ),
        "{v}"
    );
    let (st, _) = srv
        .anon()
        .post("/api/v1/records/damaged", json!({"seqs": [2]}))
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

/// A damaged record that a push replaced takes its blob references with
/// it: a blob only it named is deleted as unreferenced, one its
/// replacement names too stays.
#[tokio::test]
async fn a_replaced_damaged_record_lets_go_of_its_blobs() {
    let srv = TestServer::start(&[]);
    let a = srv.register("damaged-blobs").await;
    let (x, y) = (kid(9, 1), kid(9, 2));
    for n in [&x, &y] {
        let (st, v) = a.put_blob(n, b"age ciphertext".to_vec()).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    let mut seg = segment(1, 0, 40);
    seg["refs"] = json!([x, y]);
    assert_eq!(a.push(vec![seg.clone()]).await["stored"], 1);
    let (st, v) = a
        .post("/api/v1/records/damaged", json!({"seqs": [1]}))
        .await;
    assert_eq!((st, &v), (StatusCode::OK, &json!({"marked": 1})));
    // Sent again naming x only: the damaged row goes, and with it the
    // last reference to y.
    seg["refs"] = json!([x]);
    assert_eq!(a.push(vec![seg]).await["stored"], 1);
    let missing = missing_blobs_become(&a, &[&x, &y], &[&y]).await;
    assert_eq!(missing, json!([y]), "y is collected, x stays");
    let (st, body) = a.get_blob(&x).await;
    assert_eq!((st, &body[..]), (StatusCode::OK, &b"age ciphertext"[..]));
}
