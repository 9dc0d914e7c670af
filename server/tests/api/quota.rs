//! What the quota counts: every stored byte, ids and rows included, so no
//! shape of push grows an account past it.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{TestServer, kid};

/// A segment with `ids` new entry ids (from `first` on) and no ciphertext.
fn ids_only(first: u64, ids: u64) -> Value {
    let entry_ids: Vec<String> = (first..first + ids).map(|n| kid(2, n)).collect();
    json!({"stream": kid(1, 1), "kind": "entries", "entry_ids": entry_ids, "ciphertext": ""})
}

#[tokio::test]
async fn segments_of_ids_and_no_ciphertext_meet_the_quota() {
    let quota = 1_000_000u64;
    let srv = TestServer::start(&["--quota-bytes", &quota.to_string()]);
    let a = srv.register("ids").await;
    let mut refused = None;
    for n in 0..50 {
        let (st, v) = a
            .post(
                "/api/v1/records",
                json!({"segments": [ids_only(n * 1000, 1000)]}),
            )
            .await;
        match st {
            StatusCode::OK => {}
            StatusCode::INSUFFICIENT_STORAGE => {
                assert_eq!(v["code"], "quota_exceeded", "{v}");
                refused = Some(n);
                break;
            }
            other => panic!("push {n}: {other} {v}"),
        }
    }
    let (_, st) = a.get("/api/v1/status").await;
    let used = st["bytes_used"].as_u64().unwrap();
    assert!(
        refused.is_some(),
        "50 pushes of 1000 ids each were all stored under a {quota}-byte quota \
         (bytes_used {used}, entries {})",
        st["entries"]
    );
    assert!(used > 0 && used <= quota, "bytes_used {used}");
    // The ids are counted: 1000 of them cost more than their 64 kB of hex.
    let per_push = used / refused.unwrap().max(1);
    assert!(
        per_push >= 64_000,
        "one push of 1000 ids counted {per_push} bytes"
    );
}

#[tokio::test]
async fn a_segment_has_at_most_the_limit_of_entry_ids() {
    let max = evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT as u64;
    let srv = TestServer::start(&[]);
    let a = srv.register("many").await;
    let (st, v) = a
        .post(
            "/api/v1/records",
            json!({"segments": [ids_only(0, max + 1)]}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{v}"
    );
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains(&max.to_string()), "{msg}");
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(st["records"], 0);
    // The limit itself is fine.
    assert_eq!(a.push(vec![ids_only(0, max)]).await["stored"], 1);
}

/// One JSON page as sent: its body's size and the parsed page.
async fn json_page(a: &crate::common::Api, after: u64) -> (usize, Value) {
    let resp = a
        .http
        .get(format!("{}/api/v1/records?after={after}", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.bytes().await.unwrap();
    (body.len(), serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn a_json_page_counts_what_it_sends_against_the_page_limit() {
    let limit = 64 * 1024;
    let srv = TestServer::start(&["--max-page-bytes", &limit.to_string()]);
    let a = srv.register("pages").await;
    // Records of many ids and no ciphertext, then records whose ciphertext
    // fits the limit raw but not as base64.
    for n in 0..20 {
        a.push(vec![ids_only(n * 400, 400)]).await;
    }
    for n in 0..8 {
        a.push(vec![crate::common::segment(3, 100_000 + n, 20_000)])
            .await;
    }
    let (mut after, mut seen, mut pages) = (0, 0, 0);
    loop {
        let (size, page) = json_page(&a, after).await;
        let records = page["records"].as_array().unwrap().len();
        pages += 1;
        assert!(
            size <= limit || records == 1,
            "page {pages}: {records} records in {size} bytes against a {limit}-byte limit"
        );
        seen += records;
        after = page["next_after"].as_u64().unwrap();
        if !page["more"].as_bool().unwrap() {
            break;
        }
    }
    assert_eq!(seen, 28);
}

/// Issue 20, defect 4: with `per_item`, a batch in which one stream does
/// not fit the quota stores every other segment and names the refused ones
/// (that stream's later segments too, so its records keep their order);
/// without it, an older client's batch is refused whole as before.
#[tokio::test]
async fn per_item_push_stores_what_fits_and_names_what_the_quota_refuses() {
    use crate::common::segment;
    let srv = TestServer::start(&["--quota-bytes", "20000"]);
    let a = srv.register("items").await;
    // Stream 2's first segment is too large; its second would fit alone.
    let batch = json!({"segments": [
        segment(1, 1, 1_000),
        segment(2, 2, 30_000),
        segment(3, 3, 1_000),
        segment(2, 4, 100),
    ]});
    let (st, v) = a.post("/api/v1/records", batch.clone()).await;
    assert_eq!(st, StatusCode::INSUFFICIENT_STORAGE, "{v}");
    assert_eq!(v["code"], "quota_exceeded");
    let (_, status) = a.get("/api/v1/status").await;
    assert_eq!(
        status["records"], 0,
        "a batch without per_item is refused whole"
    );

    let (st, v) = a.post("/api/v1/records?per_item=true", batch.clone()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(2), Some(0)),
        "{v}"
    );
    assert_eq!(v["over_quota"], json!([1, 3]), "{v}");
    let (all, _) = a.pull_all(None).await;
    let streams: Vec<&str> = all.iter().map(|r| r["stream"].as_str().unwrap()).collect();
    assert_eq!(streams, [kid(1, 1), kid(1, 3)]);
    // Sent again: what is stored is known (dropped), the rest refused again.
    let (st, v) = a.post("/api/v1/records?per_item=true", batch).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
    assert_eq!(v["over_quota"], json!([1, 3]), "{v}");
    // No body of a refused segment was kept on disk.
    let on_disk: u64 = srv
        .packs()
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(on_disk, 2_000, "packs hold only the stored bodies");
}
