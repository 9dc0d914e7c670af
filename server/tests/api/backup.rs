//! `evi-server backup` beside a running server while pushes land, and
//! `evi-server restore` of what it wrote: a server started on the restored
//! folder serves exactly the records of one instant, byte for byte, with
//! every body and blob; a file the server deletes between the snapshot and
//! the copy makes a fresh snapshot; a hostile or broken archive, and a
//! folder that holds a database, are refused with nothing written.
//! Embedded store only (it reads the data folder): not in `ON_POSTGRES`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Api, PASSWORD, TestServer, files_under, kid, segment, tombstone};

fn server_cmd(args: &[&str], data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_evi-server"));
    c.args(args)
        .arg("--data")
        .arg(data)
        .env_remove("EVI_SERVER_DATABASE")
        .env_remove("EVI_SERVER_STORE")
        .env_remove("EVI_SERVER_FAULT")
        .stdin(Stdio::null());
    c
}

fn backup(data: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["backup", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    server_cmd(&args, data).output().unwrap()
}

fn restore(archive: &Path, data: &Path) -> Output {
    server_cmd(&["restore", "-i", archive.to_str().unwrap()], data)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A login of `user` as a new device on `srv`.
async fn login(srv: &TestServer, user: &str) -> Api {
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": "restored"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    srv.anon().with_token(v["token"].as_str().unwrap())
}

/// A segment whose body is `len` bytes that differ from every other
/// segment's (so a body served from the wrong place shows).
fn distinct(stream: u64, entry: u64, len: usize) -> Value {
    use base64::Engine as _;
    let mut s = segment(stream, entry, 0);
    let body: Vec<u8> = (0..len)
        .map(|i| (entry.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect();
    s["ciphertext"] = json!(base64::engine::general_purpose::STANDARD.encode(body));
    s
}

/// A server on `data` (a restored folder), in a root of its own.
fn start_on(restored: tempfile::TempDir) -> TestServer {
    TestServer::start_in(restored, &[], &[])
}

/// `archive` restored into a new root's `data`, and a server on it.
fn restored_server(archive: &Path) -> TestServer {
    let root = tempfile::tempdir().unwrap();
    let out = restore(archive, &root.path().join("data"));
    assert_ok("restore", &out);
    assert!(
        text(&out.stdout).starts_with("restored "),
        "{}",
        text(&out.stdout)
    );
    start_on(root)
}

/// The records an account holds, by seq.
async fn records(api: &Api) -> Vec<Value> {
    api.pull_all(None).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_while_pushes_run_restores_exactly_the_records_of_one_instant() {
    let srv = TestServer::start(&[]);
    let alice = srv.register("alice").await;
    let bob = srv.register("bob").await;
    // What is there before: bodies in many packs, and blobs.
    for batch in 0..60u64 {
        let segs = (0..5)
            .map(|i| {
                distinct(
                    batch % 7,
                    batch * 10 + i,
                    2_000 + (batch * 997 % 30_000) as usize,
                )
            })
            .collect();
        alice.push(segs).await;
    }
    let mut blobs = Vec::new();
    for n in 0..8u64 {
        let name = kid(4, n);
        let data: Vec<u8> = (0..1_000_000 + n * 1_000)
            .map(|i| (i * (n + 3) % 256) as u8)
            .collect();
        let (st, v) = alice.put_blob(&name, data.clone()).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        blobs.push((name, data));
    }
    bob.push(vec![distinct(100, 1, 4_000)]).await;

    // Pushes go on, from both accounts, while three backups are taken.
    let stop = Arc::new(AtomicBool::new(false));
    let mut pushers = Vec::new();
    for (who, api) in [(1u64, alice.clone()), (2, bob.clone())] {
        let stop = stop.clone();
        pushers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let e = 1_000_000 * who + n;
                api.push(vec![
                    distinct(200 + who, e, 3_000),
                    distinct(300 + who, e + 500_000, 700),
                ])
                .await;
            }
            n
        }));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut taken = Vec::new();
    for i in 0..3 {
        let before = (records(&alice).await.len(), records(&bob).await.len());
        let file = dir.path().join(format!("evi-{i}.tar"));
        let data = srv.data();
        let f = file.clone();
        let started = std::time::Instant::now();
        let out = tokio::task::spawn_blocking(move || backup(&data, &f, &[]))
            .await
            .unwrap();
        let took = started.elapsed();
        assert_ok("backup", &out);
        let after = (records(&alice).await.len(), records(&bob).await.len());
        let size = std::fs::metadata(&file).unwrap().len();
        eprintln!(
            "backup {i}: {size} bytes in {:.2} s; {}",
            took.as_secs_f64(),
            text(&out.stdout).trim()
        );
        assert!(
            text(&out.stdout).starts_with("backed up 2 accounts,"),
            "{}",
            text(&out.stdout)
        );
        taken.push((file, before, after));
    }
    stop.store(true, Ordering::Relaxed);
    for p in pushers {
        p.await.unwrap();
    }
    assert!(
        taken
            .iter()
            .any(|(_, before, after)| after.0 + after.1 > before.0 + before.1),
        "no push landed while a backup ran"
    );
    let (full_alice, full_bob) = (records(&alice).await, records(&bob).await);

    // The archive is a plain tar of a data folder, 0600, and nothing else
    // was left beside it.
    let listed: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed.len(), 3, "work files left: {listed:?}");
    use std::os::unix::fs::PermissionsExt as _;
    for (file, _, _) in &taken {
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }

    for (file, before, after) in &taken {
        let mut restored = restored_server(file);
        for (user, full, (lo, hi)) in [
            ("alice", &full_alice, (before.0, after.0)),
            ("bob", &full_bob, (before.1, after.1)),
        ] {
            let api = login(&restored, user).await;
            let got = records(&api).await;
            // One instant: every record acknowledged before the backup
            // began, none after it ended, and no gap: a prefix of what the
            // live server holds, each record the same bytes.
            assert!(
                (lo..=hi).contains(&got.len()),
                "{user}: {} records restored, {lo}..={hi} expected",
                got.len()
            );
            assert_eq!(&got[..], &full[..got.len()], "{user}: records differ");
        }
        let api = login(&restored, "alice").await;
        for (name, data) in &blobs {
            let (st, got) = api.get_blob(name).await;
            assert_eq!(st, StatusCode::OK, "blob {name}");
            assert!(got == *data, "blob {name} differs");
        }
        assert!(restored.assert_every_row_has_its_body() > 300);
        // The folder is the server's alone, as one it made itself.
        let data = restored.data();
        for p in std::iter::once(data.clone()).chain(files_under(&data)) {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            let want = if p.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode, want, "{}", p.display());
        }
        restored.stop();
    }

    // Plain `tar -xpf` also gives a folder a server starts on.
    if Command::new("tar").arg("--version").output().is_ok() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let (file, before, _) = &taken[2];
        let st = Command::new("tar")
            .arg("-C")
            .arg(&data)
            .arg("-xpf")
            .arg(file)
            .status()
            .unwrap();
        assert!(st.success());
        let restored = start_on(root);
        let got = records(&login(&restored, "alice").await).await;
        assert!(got.len() >= before.0);
        assert_eq!(&got[..], &full_alice[..got.len()]);
    }
}

#[tokio::test]
async fn a_pack_deleted_after_the_snapshot_makes_a_fresh_one() {
    let srv = TestServer::start(&[]);
    let alice = srv.register("alice").await;
    // Stream 1 shares a pack with stream 2; its forget makes the
    // compaction rewrite that pack without it, and delete the old one.
    alice
        .push(vec![distinct(1, 1, 5_000), distinct(2, 2, 5_000)])
        .await;
    alice.push(vec![distinct(3, 3, 5_000)]).await;
    let old: Vec<PathBuf> = srv.packs();
    assert_eq!(old.len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evi.tar");
    let mut child = server_cmd(&["backup", "-o", file.to_str().unwrap()], &srv.data())
        .env("EVI_SERVER_FAULT", "hold-backup-after-snapshot")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("held until a line on stdin") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "backup ended early");
    }
    // Now the server deletes a pack the snapshot names.
    let v = alice.push(vec![tombstone("forget", 1, 9)]).await;
    assert_eq!(v["stored"], 1, "{v}");
    let gone = crate::common::eventually(|| !old.iter().all(|p| p.exists())).await;
    assert!(gone, "the compaction did not replace the pack");
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{rest}");
    assert!(rest.contains("taking a fresh one"), "{rest}");
    let summary = text(&out.stdout);
    assert!(summary.contains("(2 snapshots"), "{summary}");

    let restored = restored_server(&file);
    let api = login(&restored, "alice").await;
    let kinds: Vec<(String, String)> = records(&api)
        .await
        .iter()
        .map(|r| {
            (
                r["stream"].as_str().unwrap().to_owned(),
                r["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (kid(1, 2), "entries".to_owned()),
            (kid(1, 3), "entries".to_owned()),
            (kid(1, 1), "forget".to_owned()),
        ]
    );
    assert_eq!(records(&api).await, records(&alice).await);
}

/// A tar entry by hand (ustar), so that names the `tar` crate refuses to
/// write (`..`, absolute) can be made.
fn entry(name: &str, kind: u8, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000600");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = entries.concat();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

#[tokio::test]
async fn hostile_or_broken_archives_and_a_folder_with_a_database_are_refused_leaving_nothing() {
    let mut srv = TestServer::start(&[]);
    let alice = srv.register("alice").await;
    alice.push(vec![distinct(1, 1, 3_000)]).await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.tar");
    assert_ok("backup", &backup(&srv.data(), &good, &[]));
    let good_bytes = std::fs::read(&good).unwrap();

    // An existing archive is not replaced without --force.
    let out = backup(&srv.data(), &good, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("exists already"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("hint: "),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&good).unwrap(), good_bytes);
    assert_ok("backup --force", &backup(&srv.data(), &good, &["--force"]));

    // Restoring onto the live folder is refused: it holds a database.
    let before: Vec<(PathBuf, Vec<u8>)> = files_under(&srv.data())
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("sqlite3"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let out = restore(&good, &srv.data());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("holds a database already") && err.contains("hint: move it aside"),
        "{err}"
    );
    for (p, b) in &before {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{}", p.display());
    }
    srv.stop();

    let sqlite = {
        // The database of the good archive, to build the others around.
        let root = tempfile::tempdir().unwrap();
        assert_ok("restore", &restore(&good, &root.path().join("d")));
        std::fs::read(root.path().join("d/evi-server.sqlite3")).unwrap()
    };
    let outside = dir.path().join("escaped");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "climbs out",
            archive(&[
                entry("evi-server.sqlite3", b'0', &sqlite),
                entry("../escaped", b'0', b"pwned"),
            ]),
            "climbs out of the folder",
        ),
        (
            "absolute",
            archive(&[entry(outside.to_str().unwrap(), b'0', b"pwned")]),
            "an absolute path",
        ),
        (
            "a link",
            archive(&[entry("bodies", b'5', b""), {
                let mut e = entry("bodies/1", b'2', b"");
                e[157..157 + 4].copy_from_slice(b"/etc");
                let sum: u32 = {
                    e[148..156].copy_from_slice(b"        ");
                    e[..512].iter().map(|&b| u32::from(b)).sum()
                };
                e[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
                e
            }]),
            "not a plain file or folder",
        ),
        (
            "a foreign name",
            archive(&[entry("evi-server.sqlite3-wal", b'0', b"x")]),
            "not a name a data folder holds",
        ),
        (
            "twice the database",
            archive(&[
                entry("evi-server.sqlite3", b'0', &sqlite),
                entry("evi-server.sqlite3", b'0', &sqlite),
            ]),
            "in the archive twice",
        ),
        (
            "no database",
            archive(&[entry("bodies", b'5', b"")]),
            "holds no evi-server.sqlite3",
        ),
        (
            "a damaged database",
            archive(&[entry("evi-server.sqlite3", b'0', &{
                let mut d = sqlite.clone();
                for b in &mut d[4096..8192] {
                    *b ^= 0x5a;
                }
                d
            })]),
            "",
        ),
        (
            "a database without its packs",
            archive(&[entry("evi-server.sqlite3", b'0', &sqlite)]),
            "which its database names",
        ),
        (
            "garbage",
            b"this is not a tar archive at all".repeat(40),
            "",
        ),
        ("cut short", good_bytes[..good_bytes.len() / 2].to_vec(), ""),
    ];
    for (what, bytes, says) in cases {
        let root = tempfile::tempdir().unwrap();
        let file = dir.path().join("hostile.tar");
        std::fs::write(&file, &bytes).unwrap();
        let data = root.path().join("data");
        let out = restore(&file, &data);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains(says) && err.contains("evi-server: "),
            "{what}: {err}"
        );
        assert!(out.stdout.is_empty(), "{what}");
        let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert!(left.is_empty(), "{what}: left {left:?}");
        assert!(
            !outside.exists() && !dir.path().join("escaped").exists(),
            "{what}"
        );
    }
}

#[test]
fn a_server_on_postgres_or_a_bucket_is_sent_to_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--database", "postgres://evi@127.0.0.1/evi"),
        ("--store", "s3://evi-bucket/server"),
    ] {
        let out = server_cmd(&["backup", "-o", "x.tar", flag, value], dir.path())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("embedded store")
                && err.contains("hint: back up the database with pg_dump"),
            "{err}"
        );
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[tokio::test]
async fn bodies_and_blobs_of_a_file_store_go_into_the_same_archive() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let srv = TestServer::start(&["--store", &url]);
    let alice = srv.register("alice").await;
    alice
        .push(vec![distinct(1, 1, 9_000), distinct(2, 2, 100)])
        .await;
    let blob = (0..70_000u32).map(|i| (i % 253) as u8).collect::<Vec<_>>();
    let (st, v) = alice.put_blob(&kid(4, 1), blob.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(files_under(&srv.data().join("bodies")).is_empty());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evi.tar");
    // Without the --store the server runs with, the packs are not found:
    // refused, nothing written.
    let out = backup(&srv.data(), &file, &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("which is not there") && err.contains("pass the same --store"),
        "{err}"
    );
    assert!(!file.exists());
    assert_ok("backup", &backup(&srv.data(), &file, &["--store", &url]));

    // Restored, everything is in the one folder.
    let restored = restored_server(&file);
    let api = login(&restored, "alice").await;
    assert_eq!(records(&api).await, records(&alice).await);
    assert_eq!(api.get_blob(&kid(4, 1)).await, (StatusCode::OK, blob));
    assert_eq!(restored.assert_every_row_has_its_body(), 2);
}
