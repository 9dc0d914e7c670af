//! SIGKILL while clients push: every acknowledged record survives, every
//! row still has its body, and a SQLite database passes `PRAGMA
//! integrity_check` (Postgres checks its own pages; its WAL is not ours).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{TestServer, segment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_push_loses_no_acknowledged_record() {
    let mut srv = TestServer::start(&[]);
    let api = srv.register("crashy").await;
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for client in 0..4u64 {
        let api = api.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            for batch in 0..10_000u64 {
                let segs: Vec<_> = (0..10)
                    .map(|i| segment(client, client * 1_000_000 + batch * 10 + i, 200))
                    .collect();
                let ids: Vec<String> = segs
                    .iter()
                    .map(|s| s["entry_ids"][0].as_str().unwrap().to_owned())
                    .collect();
                let resp = api
                    .http
                    .post(format!("{}/api/v1/records", api.base))
                    .bearer_auth(api.token.as_deref().unwrap())
                    .json(&serde_json::json!({ "segments": segs }))
                    .send()
                    .await;
                // Only a complete, parsed 200 answer counts as acknowledged.
                let ok = match resp {
                    Ok(r) if r.status().is_success() => r.json::<serde_json::Value>().await.is_ok(),
                    _ => false,
                };
                if !ok {
                    return;
                }
                acked.lock().unwrap().extend(ids);
            }
        }));
    }
    // Kill once a good number of batches are acknowledged, mid-stream.
    for _ in 0..600 {
        if acked.lock().unwrap().len() >= 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    srv.kill9_and_restart();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 400,
        "only {} acknowledged before the kill",
        acked.len()
    );

    // The restarted server is on a new port; the token is the same.
    let api2 = crate::common::Api {
        base: srv.url(""),
        ..api.clone()
    };
    let (all, _) = api2.pull_all(None).await;
    let stored: BTreeSet<String> = all
        .iter()
        .map(|r| r["entry_ids"][0].as_str().unwrap().to_owned())
        .collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "{} acknowledged records lost", lost.len());
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "seqs are dense"
    );
    // Pushing again after the restart still works and merges.
    let v = api2
        .push(vec![segment(0, 0, 200), segment(9, 999_999_999, 1)])
        .await;
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(1), Some(1))
    );

    let rows = srv.assert_every_row_has_its_body();
    assert!(
        rows > acked.len(),
        "{rows} rows for {} acknowledged",
        acked.len()
    );
    if srv.db.is_some() {
        return;
    }
    let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}
