//! Where bodies live, as an operator would check it: packs under
//! `<data>/bodies/`, no row without its body after a crash between the pack
//! and the commit, orphan packs swept at start, and a database from before
//! packs still serving its records.

use std::path::Path;

use evi_server::store::{blob_cost, record_cost};
use reqwest::StatusCode;
use sha2::Digest as _;

use crate::common::{TestServer, kid, segment};
use crate::wire::{Seg, push_body, seg};

/// Every record row's body is in place: its pack exists and holds the bytes
/// the row points at. Returns how many rows point into packs.
fn every_row_has_its_body(data: &Path) -> usize {
    let db = rusqlite::Connection::open(data.join("evi-server.sqlite3")).unwrap();
    let mut st = db
        .prepare("SELECT user_id, body_pack, body_offset, body_len FROM records WHERE body_pack IS NOT NULL")
        .unwrap();
    let rows: Vec<(i64, String, i64, i64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (user, pack, offset, len) in &rows {
        let path = data.join("bodies").join(user.to_string()).join(pack);
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("row points at missing pack {}: {e}", path.display()))
            .len();
        assert!(size >= (offset + len) as u64, "pack {pack} too short");
    }
    rows.len()
}

#[tokio::test]
async fn a_crash_between_the_pack_and_the_commit_leaves_an_orphan_that_is_swept() {
    let mut srv = TestServer::start_env(&[], &[("EVI_SERVER_FAULT", "crash-after-body")]);
    let a = srv.register("crash").await;
    let segs: Vec<Seg> = (0..20).map(|i| seg(1, i, 5_000)).collect();
    // The server aborts after writing the pack, before committing: no answer.
    let resp = a
        .http
        .post(format!("{}/api/v1/records", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .header("content-type", evi_shared::frames::CONTENT_TYPE)
        .body(push_body(&segs))
        .send()
        .await;
    assert!(resp.is_err(), "the push was answered: {resp:?}");
    assert!(!srv.wait().success(), "the server did not abort");
    let orphans = srv.packs();
    assert_eq!(orphans.len(), 1, "the pack was written before the crash");
    assert_eq!(std::fs::metadata(&orphans[0]).unwrap().len(), 20 * 5_000);
    assert_eq!(
        every_row_has_its_body(&srv.data()),
        0,
        "and no row committed"
    );

    // Restarted without the fault once the orphan is older than the
    // sweep's minimum age: it is gone, nothing points at it.
    backdate(&orphans[0]);
    srv.restart_env(&[]);
    assert!(
        srv.packs().is_empty(),
        "orphan not swept: {:?}",
        srv.packs()
    );
    assert!(
        srv.log().contains("orphan body packs"),
        "the sweep is logged"
    );
    let a = srv.rebase(&a);
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(
        (st["records"].as_u64(), st["bytes_used"].as_u64()),
        (Some(0), Some(0))
    );

    // The client's retry stores everything, exactly once.
    let v = a.push_frames(&segs).await;
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(20), Some(0))
    );
    assert_eq!(a.push_frames(&segs).await["stored"], 0);
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 20);
    for ((h, body), sent) in all.iter().zip(&segs) {
        assert_eq!(h.entry_ids, sent.head.entry_ids);
        assert!(body == &sent.body);
    }
    assert_eq!(every_row_has_its_body(&srv.data()), 20);
    assert_eq!(srv.packs().len(), 1);
}

#[tokio::test]
async fn old_orphan_packs_are_swept_at_start_young_ones_and_used_ones_kept() {
    let mut srv = TestServer::start(&[]);
    let a = srv.register("sweep").await;
    a.push_frames(&[seg(1, 1, 100), seg(1, 2, 100)]).await;
    // A later batch of which one segment is new: its pack is partly used.
    a.push_frames(&[seg(1, 2, 100), seg(1, 3, 100)]).await;
    let kept = srv.packs();
    assert_eq!(kept.len(), 2);
    let user_dir = kept[0].parent().unwrap().to_owned();
    // What a crashed push leaves: a pack, durable, named like any other,
    // written longer ago than any push could still be committing.
    let hour_and_a_bit = evi_server::bodies::ORPHAN_MIN_AGE + std::time::Duration::from_secs(60);
    let old = ulid::Ulid::from_datetime(std::time::SystemTime::now() - hour_and_a_bit);
    let orphan = user_dir.join(old.to_string());
    std::fs::write(&orphan, vec![7u8; 4096]).unwrap();
    // And what a push still on its way to its commit holds: a pack written
    // a moment ago (another server on the folder, or a replica on a shared
    // backend, may commit its rows any time now).
    let young = user_dir.join(ulid::Ulid::new().to_string());
    std::fs::write(&young, vec![8u8; 4096]).unwrap();
    // A file that is not a pack is not the sweep's to judge.
    let stray = user_dir.join("README");
    std::fs::write(&stray, "not a pack").unwrap();

    srv.kill9_and_restart();
    assert!(!orphan.exists(), "old orphan pack kept");
    assert!(
        young.exists(),
        "a pack younger than the minimum age was swept"
    );
    assert!(stray.exists());
    for p in &kept {
        assert!(p.exists(), "used pack {} removed", p.display());
    }
    assert!(
        srv.log().contains("kept unreferenced body packs younger"),
        "{}",
        srv.log()
    );
    let a = srv.rebase(&a);
    let (all, _) = a.pull_all_frames().await;
    let entries: Vec<_> = all.iter().map(|(h, _)| h.entry_ids[0].clone()).collect();
    assert_eq!(
        entries,
        [seg(1, 1, 0), seg(1, 2, 0), seg(1, 3, 0)].map(|s| s.head.entry_ids[0].clone())
    );
    assert_eq!(every_row_has_its_body(&srv.data()), 3);
    // Pack files are readable by the server's user only.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kept[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "pack mode {mode:o}");
}

/// Renames a pack to a name (ULID) two hours older, as if it had lain
/// there since.
fn backdate(pack: &Path) {
    let id = ulid::Ulid::from_string(pack.file_name().unwrap().to_str().unwrap()).unwrap();
    let old = ulid::Ulid::from_parts(id.timestamp_ms() - 2 * 60 * 60 * 1000, id.random());
    std::fs::rename(pack, pack.with_file_name(old.to_string())).unwrap();
}

const TOKEN: &str = "evi_0000000000000000000000000000000000000000000000000000000000000001";

/// A data folder as the server before packs left it: the first two
/// migrations, one user with a device (token [`TOKEN`]) and `n` records of
/// inline ciphertext `[i; 100 + i]`, entry ids as [`segment`] makes them.
fn old_data_folder(n: u64) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = rusqlite::Connection::open(data.join("evi-server.sqlite3")).unwrap();
    db.execute_batch(include_str!("../../migrations/sqlite/0001_init.sql"))
        .unwrap();
    db.execute_batch(include_str!(
        "../../migrations/sqlite/0002_record_device.sql"
    ))
    .unwrap();
    db.pragma_update(None, "user_version", 2).unwrap();
    let hash: [u8; 32] = sha2::Sha256::digest(TOKEN.as_bytes()).into();
    let mut bytes = 0;
    db.execute(
        "INSERT INTO users (id, name, password_hash, created_at) VALUES (1, 'old', 'x', 0)",
        [],
    )
    .unwrap();
    db.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at)
         VALUES ('dev-old', 1, 'old', ?1, 0, 0)",
        [&hash[..]],
    )
    .unwrap();
    for i in 1..=n {
        let s = segment(1, i, 0);
        let entry = s["entry_ids"][0].as_str().unwrap();
        let ct = vec![i as u8; 100 + i as usize];
        bytes += ct.len() as i64;
        db.execute(
            "INSERT INTO records (user_id, seq, stream, kind, entry_ids, ciphertext, created_at, device_id)
             VALUES (1, ?1, ?2, 'entries', ?3, ?4, 0, 'dev-old')",
            rusqlite::params![i as i64, s["stream"].as_str().unwrap(), entry, ct],
        )
        .unwrap();
        db.execute(
            "INSERT INTO entries (user_id, entry_id, seq) VALUES (1, ?1, ?2)",
            rusqlite::params![hex::decode(entry).unwrap(), i as i64],
        )
        .unwrap();
    }
    // And one blob of 1000 bytes (its row: status only reads the counters).
    db.execute(
        "INSERT INTO blobs (user_id, name, size, created_at) VALUES (1, ?1, 1000, 0)",
        [kid(4, 1)],
    )
    .unwrap();
    bytes += 1000;
    db.execute(
        "UPDATE users SET newest_seq = ?1, record_count = ?1, entry_count = ?1, blob_count = 1,
         bytes_used = ?2",
        rusqlite::params![n as i64, bytes],
    )
    .unwrap();
    root
}

#[tokio::test]
async fn a_database_from_before_packs_still_serves_its_records() {
    let srv = TestServer::start_in(old_data_folder(5), &[], &[]);
    let a = srv.anon().with_token(TOKEN);
    let (st, status) = a.get("/api/v1/status").await;
    assert_eq!(st, StatusCode::OK, "{status}");
    assert_eq!(status["records"], 5);
    // Usage counted again as the quota counts it now: rows and ids too.
    let bodies: u64 = (1..=5).map(|i| 100 + i).sum();
    assert_eq!(
        status["bytes_used"],
        bodies + 5 * record_cost(0, 1) + blob_cost(1000)
    );

    // Old records, inline in their rows, on both wires.
    let (json_all, _) = a.pull_all(None).await;
    assert_eq!(json_all.len(), 5);
    let p = a.pull_frames_page(0, None).await;
    assert_eq!(p.records.len(), 5);
    for (i, (h, body)) in p.records.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(h.seq, n);
        assert_eq!(h.device.as_deref(), Some("dev-old"));
        assert_eq!(body, &vec![n as u8; 100 + n as usize]);
    }

    // Their entry ids are still known: a retry of an old one is dropped, a
    // new one goes into a pack after them.
    let v = a.push(vec![segment(1, 3, 10), segment(1, 6, 10)]).await;
    assert_eq!(
        (
            v["stored"].as_u64(),
            v["dropped"].as_u64(),
            v["newest_seq"].as_u64()
        ),
        (Some(1), Some(1), Some(6))
    );
    let mut new = seg(1, 7, 50);
    new.body = vec![0xee; 50];
    a.push_frames(&[new]).await;
    let (all, _) = a.pull_all_frames().await;
    let seqs: Vec<u64> = all.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    assert_eq!(all[5].1, vec![6u8; 10]);
    assert_eq!(all[6].1, vec![0xee; 50]);
    assert_eq!(srv.packs().len(), 2);
    assert_eq!(every_row_has_its_body(&srv.data()), 2);
    // Old rows keep their ids as hex text; new ones hold the raw MACs, half
    // the bytes.
    let db = rusqlite::Connection::open(srv.data().join("evi-server.sqlite3")).unwrap();
    let forms: Vec<(i64, i64, Option<i64>)> = db
        .prepare("SELECT seq, length(entry_ids), length(entry_id_bytes) FROM records ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut want: Vec<(i64, i64, Option<i64>)> = (1..=5).map(|i| (i, 64, None)).collect();
    want.extend([(6, 0, Some(32)), (7, 0, Some(32))]);
    assert_eq!(forms, want);
}

#[tokio::test]
async fn a_damaged_pack_cuts_the_framed_page_off_instead_of_ending_it_short() {
    let srv = TestServer::start(&[]);
    let a = srv.register("damaged").await;
    a.push_frames(&[seg(1, 1, 1000)]).await;
    a.push_frames(&[seg(1, 2, 1000)]).await;
    // The second push's pack loses its tail (a disk fault, an operator).
    let packs = srv.packs();
    let second = packs.iter().max().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(second)
        .unwrap()
        .set_len(10)
        .unwrap();

    let resp = a
        .http
        .get(format!("{}/api/v1/records?after=0", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .header("accept", evi_shared::frames::CONTENT_TYPE)
        .send()
        .await;
    // The page was streaming when the body failed, so the connection is cut:
    // before the status arrives, or in the body. Either way a client never
    // reads a whole page (one with its end frame).
    if let Ok(resp) = resp {
        assert_eq!(resp.status(), StatusCode::OK);
        if let Ok(bytes) = resp.bytes().await {
            let mut r = evi_shared::frames::FrameReader::new(&bytes[..], u32::MAX);
            let whole = std::iter::from_fn(|| r.next_frame().transpose()).all(|f| f.is_ok());
            assert!(!whole, "a page with a missing body read as whole");
        }
    }
    // The JSON page cannot start before its bodies are read: a plain 500.
    let (st, v) = a.get("/api/v1/records?after=0").await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("internal"))
    );
    // The first record alone is still served.
    let p = a.pull_frames_page(0, Some(1)).await;
    assert_eq!(p.records.len(), 1);
}
