//! Where bodies live, as an operator would check it: packs under
//! `bodies/` of the data folder or the bucket, no row without its body
//! after a crash between the pack and the commit, orphan packs swept at
//! start, and a damaged pack refused (a database from before packs is in
//! sqlite_only.rs).

use std::path::Path;

use reqwest::StatusCode;

use crate::common::TestServer;
use crate::wire::{Seg, push_body, seg};

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
        srv.assert_every_row_has_its_body(),
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
    assert_eq!(srv.assert_every_row_has_its_body(), 20);
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
    assert_eq!(srv.assert_every_row_has_its_body(), 3);
    // Pack files are readable by the server's user only. (In a bucket the
    // object store's files are its own, not the server's, to make private.)
    if srv.s3.is_some() {
        return;
    }
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
