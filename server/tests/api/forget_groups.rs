//! A forget of a stream takes its group too: the records pushed with the
//! forgotten stream as their `group` (a Claude Code session's subagent
//! transcripts, each a stream of its own) are deleted with it, and refused
//! until an undo, whichever device pushed them and whether or not the
//! device that forgot knew of them.

use serde_json::{Value, json};

use crate::common::{TestServer, held, kid, segment, tombstone};

/// A segment of stream `stream` in the group of stream `group`.
fn in_group(stream: u64, group: u64, entry: u64) -> Value {
    let mut s = segment(stream, entry, 64);
    s["group"] = json!(kid(1, group));
    s
}

#[tokio::test]
async fn a_forget_deletes_and_refuses_the_streams_of_its_group_until_undone() {
    let srv = TestServer::start(&[]);
    let a = srv.register("groups").await;
    // Stream 1 (the session), 2 and 3 in its group (subagents), 4 apart.
    let v = a
        .push(vec![
            segment(1, 1, 64),
            in_group(2, 1, 2),
            in_group(3, 1, 3),
            segment(4, 4, 64),
        ])
        .await;
    assert_eq!(v["stored"], 4, "{v}");
    let (_, status) = a.get("/api/v1/status").await;
    let bytes_before = status["bytes_used"].as_u64().unwrap();

    let v = a.push(vec![tombstone("forget", 1, 1)]).await;
    assert_eq!(v["stored"], 1, "{v}");
    assert_eq!(
        held(&a).await,
        vec![
            (kid(1, 4), "entries".to_owned()),
            (kid(1, 1), "forget".to_owned())
        ],
        "the group went with the stream"
    );
    let (_, status) = a.get("/api/v1/status").await;
    assert_eq!(status["records"], 2, "{status}");
    assert!(status["bytes_used"].as_u64().unwrap() < bytes_before);

    // A device that never heard of the forget pushes a subagent of the
    // session, new or known: refused. Another stream is not.
    let v = a
        .push(vec![
            in_group(5, 1, 5),
            in_group(2, 1, 6),
            segment(4, 7, 64),
        ])
        .await;
    assert_eq!(v["forgotten"], json!([0, 1]), "{v}");
    assert_eq!(v["stored"], 1, "{v}");
    // In the same batch as its forget: refused after it, taken before it.
    let v = a
        .push(vec![
            in_group(6, 4, 8),
            tombstone("forget", 4, 9),
            in_group(7, 4, 10),
        ])
        .await;
    assert_eq!(
        (&v["stored"], &v["forgotten"]),
        (&json!(2), &json!([2])),
        "{v}"
    );
    assert!(!held(&a).await.iter().any(|(s, _)| *s == kid(1, 6)));

    // The undo: the group is taken again.
    a.push(vec![tombstone("unforget", 1, 11)]).await;
    let v = a.push(vec![in_group(2, 1, 2), in_group(5, 1, 5)]).await;
    assert_eq!(v["stored"], 2, "{v}");
    assert!(v["forgotten"].is_null(), "{v}");
    let streams: Vec<String> = held(&a).await.into_iter().map(|(s, _)| s).collect();
    assert!(streams.contains(&kid(1, 2)) && streams.contains(&kid(1, 5)));
    // A group id is a keyed id like any other.
    let mut bad = in_group(8, 1, 12);
    bad["group"] = json!("not-an-id");
    let (st, v) = a
        .post("/api/v1/records", json!({ "segments": [bad] }))
        .await;
    assert_eq!(st, reqwest::StatusCode::BAD_REQUEST, "{v}");
}
