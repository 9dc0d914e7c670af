//! Issue 20: the ways `evi sync watch`, pull and the single-session fetch
//! drifted from the server quietly. Each test is one defect, named for what
//! the user relies on: a server restored from an older backup (2), a push
//! that keeps failing (4), a session this device pushed and lost (5), a
//! revoked token and a new login (7), a recreated `transcripts/` (8), and
//! a server that comes back (10). The waits are for a state to be reached;
//! the one speed asserted (defect 10) is a bound far above what it takes.

use std::time::Duration;

use crate::common::{Device, TestServer, today};
use crate::watch::{line, until, watch_with};

fn path(session: &str) -> String {
    format!("transcripts/{}/{session}.jsonl", today())
}

// Defect 8: `transcripts/` moved away and made again is watched again.

#[test]
fn a_recreated_transcripts_folder_is_watched_again() {
    let srv = TestServer::start();
    let a = Device::new();
    a.init(&srv, "pat", "laptop");
    a.append(&path("FIRST"), line("first", 0).as_bytes());
    let _w = watch_with(&a, &["--scan-secs", "600", "--backoff-max-secs", "1"]);
    let entries = || srv.get_json(&a.token(), "status")["entries"].clone();
    until("the first line is pushed", 20, || entries() == 1);

    let t = a.home().join("transcripts");
    std::fs::rename(&t, a.home().join("transcripts.moved")).unwrap();
    std::fs::create_dir(&t).unwrap();
    // What the move and the mkdir start is over (nothing new to push).
    std::thread::sleep(Duration::from_millis(1500));
    a.append(&path("SECOND"), line("second", 0).as_bytes());
    until("a line in the new folder is pushed", 10, || entries() == 2);
}
