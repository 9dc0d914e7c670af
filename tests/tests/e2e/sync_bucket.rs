//! Devices syncing through a server whose bodies and blobs are in an
//! S3-compatible bucket (`--store s3://…`, a real s3s-fs, see
//! [`crate::s3`]): they converge as on the data folder, the data folder
//! holds only the database, and a bucket that goes away mid-work delays a
//! push (the client retries the 503s) without losing or doubling anything.

use sha2::{Digest, Sha256};

use crate::common::{Device, TestServer, journal_line};
use crate::s3::{S3Server, SECRET_KEY, files_under};

const DAY: &str = "2026-06-11";

fn line(n: u32) -> String {
    format!("{{\"role\":\"user\",\"content\":\"line {n}\",\"ts\":\"2026-06-11T09:00:{n:02}Z\"}}\n")
}

fn server_on(s3: &S3Server, logs: &std::path::Path) -> TestServer {
    let (url, envs) = s3.server_args("evi");
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestServer::start_logged(&["--store", &url], &envs, logs)
}

/// Files of the server's data folder besides its database and lock.
fn stray_files(server: &TestServer) -> Vec<String> {
    let data = server.data.path();
    files_under(data)
        .into_iter()
        .map(|p| p.strip_prefix(data).unwrap().display().to_string())
        .filter(|p| !p.starts_with("evi-server.sqlite3") && p != "evi-server.lock")
        .collect()
}

#[test]
#[cfg_attr(
    evi_no_s3,
    ignore = "needs EVI_TEST_S3_SERVER (s3s-fs; .ci/run installs it)"
)]
fn two_devices_converge_through_a_bucket_and_the_data_folder_holds_no_body_or_blob() {
    let Some(s3) = S3Server::start() else { return };
    let logs = tempfile::tempdir().unwrap();
    let server = server_on(&s3, logs.path());
    let (a, b) = (Device::new(), Device::new());
    let text: String = (1..=5).map(line).collect();
    a.write(DAY, "S1", text.as_bytes());
    let blob = b"fn main() { println!(\"before the edit\"); }\n".to_vec();
    let sha = hex::encode(Sha256::digest(&blob));
    a.put(&format!("checkpoints/blobs/{sha}"), &blob);
    a.put(
        "checkpoints/journal.jsonl",
        journal_line(DAY, 1, "/src/main.rs", &sha, blob.len()).as_bytes(),
    );
    a.init(&server, "bucket", "laptop");
    a.sync_ok(&["push"]);
    b.join_copying_key(&a, &server.url, "bucket", "desktop");
    b.sync_ok(&["pull"]);
    assert!(
        b.tree("transcripts") == a.tree("transcripts"),
        "transcripts differ"
    );
    assert_eq!(
        b.tree("checkpoints")[&format!("blobs/{sha}")].as_deref(),
        Some(&blob[..])
    );

    let keys = s3.keys();
    assert!(
        keys.iter().any(|k| k.starts_with("evi/bodies/")),
        "{keys:?}"
    );
    assert!(keys.iter().any(|k| k.starts_with("evi/blobs/")), "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("evi/")), "{keys:?}");
    assert_eq!(stray_files(&server), Vec::<String>::new());
    let log = std::fs::read_to_string(logs.path().join("stderr.log")).unwrap();
    assert!(!log.contains(SECRET_KEY), "the secret key reached the log");
}

#[test]
#[cfg_attr(
    evi_no_s3,
    ignore = "needs EVI_TEST_S3_SERVER (s3s-fs; .ci/run installs it)"
)]
fn a_push_while_the_bucket_is_down_waits_it_out_and_lands_once() {
    let Some(mut s3) = S3Server::start() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let server = server_on(&s3, logs.path());
    let (a, b) = (Device::new(), Device::new());
    a.write(DAY, "S1", line(1).as_bytes());
    a.init(&server, "outage", "laptop");
    a.sync_ok(&["push"]);

    s3.stop();
    let more: String = (1..=4).map(line).collect();
    a.write(DAY, "S1", more.as_bytes());
    let push = a
        .sync_cmd()
        .args(["sync", "push"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the server has refused the push for want of its store, the
    // store comes back; the client's retry then lands it.
    let log = logs.path().join("stderr.log");
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("the object store did not answer")
    {
        assert!(
            start.elapsed().as_secs() < 60,
            "the push never reached the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    s3.start_again();
    let out = push.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("pushed 3 entries in 1 sessions"),
        "{stdout}"
    );
    assert!(stdout.contains(", 0 already on the server)"), "{stdout}");
    assert!(
        a.sync_ok(&["push"]).starts_with("pushed 0 entries"),
        "nothing left to push"
    );

    b.join_copying_key(&a, &server.url, "outage", "desktop");
    b.sync_ok(&["pull"]);
    assert!(
        b.tree("transcripts") == a.tree("transcripts"),
        "transcripts differ"
    );
}
