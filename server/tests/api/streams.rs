//! One stream's records alone (`GET /records?stream=`): what a device
//! fetches to resume one session without the rest of the history.

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{Api, TestServer, kid, segment};

/// Every record of `stream` after 0, following cursors with page size `limit`.
async fn stream_all(a: &Api, stream: &str, limit: u32) -> Vec<Value> {
    let mut after = 0u64;
    let mut out = Vec::new();
    loop {
        let (st, v) = a
            .get(&format!(
                "/api/v1/records?stream={stream}&after={after}&limit={limit}"
            ))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        out.extend(v["records"].as_array().unwrap().iter().cloned());
        after = v["next_after"].as_u64().unwrap();
        if !v["more"].as_bool().unwrap() {
            return out;
        }
    }
}

#[tokio::test]
async fn one_stream_comes_alone_in_seq_order_across_pages() {
    let srv = TestServer::start(&[]);
    let a = srv.register("streams").await;
    // Three streams interleaved: stream 1 at every third seq.
    let segs: Vec<_> = (0..30).map(|i| segment(i % 3, i, 10)).collect();
    assert_eq!(a.push(segs).await["stored"], 30);
    let (_, caps) = a.get("/api/v1/capabilities").await;
    assert_eq!(caps["stream_pull"], true);

    let one = stream_all(&a, &kid(1, 1), 4).await;
    let seqs: Vec<u64> = one.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..10).map(|k| 3 * k + 2).collect::<Vec<_>>());
    assert!(one.iter().all(|r| r["stream"] == kid(1, 1)));
    // After a cursor: only the stream's later records.
    let (_, v) = a
        .get(&format!("/api/v1/records?stream={}&after=20", kid(1, 1)))
        .await;
    let seqs: Vec<u64> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![23, 26, 29]);
    assert_eq!(v["next_after"], 29);
    // A stream with no record: an empty page, the cursor as asked.
    let (_, v) = a
        .get(&format!("/api/v1/records?stream={}&after=7", kid(1, 99)))
        .await;
    assert_eq!(v["records"].as_array().unwrap().len(), 0);
    assert_eq!((&v["next_after"], &v["more"]), (&7.into(), &false.into()));

    // Another user's stream of the same id is not this one's.
    let b = srv.register("other").await;
    b.push(vec![segment(1, 500, 10)]).await;
    assert_eq!(stream_all(&b, &kid(1, 1), 100).await.len(), 1);
    assert_eq!(stream_all(&a, &kid(1, 1), 100).await.len(), 10);

    // A stream id that is not a keyed id.
    let (st, v) = a.get("/api/v1/records?stream=abc").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["code"], "invalid_id", "{v}");
}
