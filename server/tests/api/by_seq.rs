//! A record's rows go by its seq (a forget, a damaged record, a superseded
//! one): every `DELETE … WHERE user_id = ? AND seq = ?` must find its rows
//! through an index on both backends. Without one on `entries`, each delete
//! read every entry of the account inside the write transaction: 1,000
//! seqs against 200,000 entries held the writer 7.8 s, and every other
//! account's push with it.

use crate::common::{TestServer, pg_exec, segment};

/// The tables rows are deleted from by seq.
const BY_SEQ: &[&str] = &["entries", "records", "damaged_records", "blob_refs"];

/// The plan of deleting `table`'s rows of one seq, one line per step.
fn plan(srv: &TestServer, table: &str) -> String {
    let delete = format!("DELETE FROM {table} WHERE user_id = 1 AND seq = 1");
    match &srv.db {
        Some(db) => pg_exec(
            &db.url,
            &format!("SET enable_seqscan = off; EXPLAIN {delete}"),
        )
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .collect::<Vec<_>>()
        .join("\n"),
        None => {
            let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
            db.prepare(&format!("EXPLAIN QUERY PLAN {delete}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
                .join("\n")
        }
    }
}

#[tokio::test]
async fn every_delete_by_seq_finds_its_rows_through_an_index() {
    let srv = TestServer::start(&[]);
    let a = srv.register("seqs").await;
    a.push(vec![segment(1, 1, 10)]).await;
    for table in BY_SEQ {
        let plan = plan(&srv, table);
        // SQLite: `SEARCH t USING … (user_id=? AND seq=?)`; Postgres:
        // `Index Cond: ((user_id = 1) AND (seq = 1))`. A search by user
        // alone, filtered by seq, reads the whole account.
        let by_seq = plan.lines().any(|l| {
            (l.contains("SEARCH") && l.contains("seq=?"))
                || (l.contains("Index Cond") && l.contains("seq = "))
        });
        assert!(
            by_seq,
            "deleting {table}'s rows of a seq reads past them:\n{plan}"
        );
    }
}
