//! `evi-server backup` taken beside the running server while a device
//! pushes session after session, then `evi-server restore` into a new
//! folder and a server on it: a new device of the account pulls exactly
//! the sessions of one instant (all those pushed before the backup began,
//! then an unbroken run of the ones pushed during it), each byte for byte
//! the pushing device's file, with the checkpoint blobs, and no body
//! missing. The embedded store only: not in `ON_POSTGRES`.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::common::{Device, TestServer, bin, sessions, today};

fn line(session: &str, n: usize) -> String {
    format!(
        "{{\"role\":\"user\",\"content\":\"{session} line {n} {}\"}}\n",
        "x".repeat(n * 37 % 400)
    )
}

fn session_bytes(session: &str, lines: usize) -> Vec<u8> {
    (0..lines)
        .map(|n| line(session, n))
        .collect::<String>()
        .into_bytes()
}

fn during(k: usize) -> String {
    format!("during-{k:04}")
}

#[test]
fn a_backup_taken_while_a_device_pushes_restores_whole_sessions_of_one_instant() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let day = today();
    for k in 0..6 {
        let s = format!("before-{k}");
        a.write(&day, &s, &session_bytes(&s, 40 + k * 10));
    }
    a.add_checkpoints(&day, 4, 200_000, 3);
    a.sync_ok(&["push"]);

    // One session more per push, while the backup runs.
    let a = Arc::new(a);
    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(AtomicUsize::new(0));
    let pusher = {
        let (a, stop, pushed, day) = (a.clone(), stop.clone(), pushed.clone(), day.clone());
        std::thread::spawn(move || {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) || k < 2 {
                a.write(&day, &during(k), &session_bytes(&during(k), 5 + k % 7));
                a.sync_ok(&["push"]);
                k += 1;
                pushed.store(k, Ordering::SeqCst);
            }
        })
    };
    while pushed.load(Ordering::SeqCst) < 1 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evi-server.tar");
    let lo = pushed.load(Ordering::SeqCst);
    let started = std::time::Instant::now();
    let out = Command::new(bin("evi-server"))
        .arg("backup")
        .arg("--data")
        .arg(server.data.path())
        .arg("-o")
        .arg(&file)
        .output()
        .unwrap();
    let took = started.elapsed();
    let hi = pushed.load(Ordering::SeqCst) + 1;
    stop.store(true, Ordering::Relaxed);
    pusher.join().unwrap();
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "backup: {summary}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "backup: {} bytes in {:.2} s, {lo}..{hi} sessions pushed meanwhile; {summary}",
        std::fs::metadata(&file).unwrap().len(),
        took.as_secs_f64()
    );
    assert!(summary.starts_with("backed up 1 accounts,"), "{summary}");

    // A new folder, a server on it.
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(bin("evi-server"))
        .arg("restore")
        .arg("--data")
        .arg(data.path())
        .arg("-i")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = TestServer::start_in(data, &[], &[]);
    let b = Device::new();
    b.join_copying_key(&a, &restored.url, "pat", "desktop");
    // A body the restored server lacked would fail this pull.
    b.sync_ok(&["pull"]);

    let got = sessions(&b);
    let n = got.iter().filter(|s| s.starts_with("during-")).count();
    assert!(
        (lo..=hi).contains(&n),
        "{n} of the sessions pushed during the backup came back; {lo}..={hi} expected"
    );
    let mut want: std::collections::BTreeSet<String> =
        (0..6).map(|k| format!("before-{k}")).collect();
    want.extend((0..n).map(during));
    assert_eq!(got, want, "not the sessions of one instant");
    let (ta, tb) = (a.tree("transcripts"), b.tree("transcripts"));
    for (rel, bytes) in &tb {
        assert_eq!(ta.get(rel), Some(bytes), "{rel} differs from the laptop's");
    }
    assert_eq!(
        a.tree("checkpoints/blobs"),
        b.tree("checkpoints/blobs"),
        "checkpoint blobs"
    );
}
