//! One server per data folder: a second `evi-server` on a folder in use is
//! refused before it touches anything, and says which folder and process.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use crate::common::TestServer;
use crate::wire::seg;

#[tokio::test]
async fn a_second_server_on_the_same_data_folder_refuses_to_start() {
    let srv = TestServer::start(&[]);
    let a = srv.register("lock").await;
    a.push_frames(&[seg(1, 1, 100)]).await;
    // What a push in flight holds: a pack no row points at yet. A second
    // server's start-up sweep must never get to it.
    let user_dir = srv.packs()[0].parent().unwrap().to_owned();
    let in_flight = user_dir.join(ulid::Ulid::new().to_string());
    std::fs::write(&in_flight, vec![1u8; 64]).unwrap();

    let mut second = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--registration",
            "open",
            "--data",
        ])
        .arg(srv.data())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A server that starts says so on its first stdout line; a refused one
    // closes stdout with nothing on it.
    let mut first_line = String::new();
    BufReader::new(second.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    if !first_line.is_empty() {
        let _ = second.kill();
        let _ = second.wait();
        panic!("a second server started on the data folder in use: {first_line:?}");
    }
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let folder = std::path::absolute(srv.data()).unwrap();
    assert!(
        stderr.contains(&format!(
            "the data folder {} is in use by another evi-server (pid {})",
            folder.display(),
            srv.pid()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: one evi-server per data folder"),
        "{stderr}"
    );
    assert!(
        in_flight.exists(),
        "the refused server swept the data folder"
    );

    // The first one goes on serving, its records whole.
    a.push_frames(&[seg(1, 2, 100)]).await;
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 2);
}

#[tokio::test]
async fn the_data_folder_is_free_again_once_its_server_is_gone() {
    let mut srv = TestServer::start(&[]);
    let a = srv.register("relock").await;
    a.push_frames(&[seg(1, 1, 100)]).await;
    // A SIGKILL leaves the lock file but not the lock: the kernel drops it.
    srv.kill9_and_restart();
    let a = srv.rebase(&a);
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 1);
    let pid = std::fs::read_to_string(srv.data().join("evi-server.lock")).unwrap();
    assert_eq!(
        pid.trim(),
        srv.pid().to_string(),
        "the lock names its holder"
    );
}
