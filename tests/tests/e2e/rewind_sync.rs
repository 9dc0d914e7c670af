//! Checkpoints between devices (issue 14): a checkpoint made on one device
//! is restored on another after a pull, and a rewind on the first, pushed,
//! breaks nothing on either side; what was pushed stays as history.

use crate::common::{Device, TestServer};
use crate::sync_journal::checkpoint;

/// `evi checkpoints restore SEQ --device laptop --to TO [extra…]` on `dev`.
fn restore_laptops(dev: &Device, seq: &str, to: &str, extra: &[&str]) -> crate::common::Run {
    let args = [
        "checkpoints",
        "restore",
        seq,
        "--device",
        "laptop",
        "--to",
        to,
    ];
    dev.evi(&[&args[..], extra].concat())
}

/// `evi rewind --list --device laptop --json` on `dev`.
fn laptops_listing(dev: &Device) -> serde_json::Value {
    let out = run_ok(dev, &["rewind", "--list", "--device", "laptop", "--json"]);
    serde_json::from_str(&out).unwrap()
}

/// The seqs of a `--list --json`, newest first.
fn seqs(listing: &serde_json::Value) -> Vec<u64> {
    let cps = listing["checkpoints"].as_array().unwrap();
    cps.iter().map(|c| c["seq"].as_u64().unwrap()).collect()
}

fn run_ok(dev: &Device, args: &[&str]) -> String {
    let r = dev.evi(args);
    assert_eq!(r.code, 0, "evi {args:?}: {}", r.stderr);
    r.stdout
}

#[test]
fn a_checkpoint_from_one_device_is_restored_on_another_and_a_rewind_there_breaks_nothing() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "alice", "laptop");
    b.join_copying_key(&a, &server.url, "alice", "desk");

    // eVi on the laptop: two overwrites and a new file.
    let proj = a.dir.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let at = |f: &str| proj.join(f).display().to_string();
    let (l1, _) = checkpoint(&a, 1, &at("a.py"), "a v0\n");
    let (l2, _) = checkpoint(&a, 2, &at("b.py"), "b v0\n");
    let l3 = format!(
        "{{\"seq\":3,\"ts\":\"2026-06-08T10:00:03Z\",\"path\":\"{}\",\"op\":\"create\"}}\n",
        at("c.py")
    );
    for (f, text) in [("a.py", "a v1\n"), ("b.py", "b v1\n"), ("c.py", "c v1\n")] {
        std::fs::write(proj.join(f), text).unwrap();
    }
    a.put(
        "checkpoints/journal.jsonl",
        [l1.as_str(), &l2, &l3].concat().as_bytes(),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);

    // The desk lists the laptop's checkpoints, with the laptop's paths.
    let r = b.evi(&["rewind", "--list", "--device", "laptop"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("the paths are that device's"),
        "{}",
        r.stderr
    );
    let listed: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(listed.len(), 3, "{}", r.stdout);
    assert!(
        listed[2].ends_with(&format!("modify {}", at("a.py"))),
        "{}",
        listed[2]
    );

    // The laptop's path is never written without being asked for.
    let r = b.evi(&["checkpoints", "restore", "1", "--device", "laptop"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("a path of that device"), "{}", r.stderr);
    assert!(r.stderr.contains("--to PATH"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(proj.join("a.py")).unwrap(),
        "a v1\n"
    );

    // --to writes the laptop's bytes on the desk; an existing file only
    // with --force.
    let here = b.dir.path().join("a-from-laptop.py");
    let to = here.to_str().unwrap();
    let r = restore_laptops(&b, "1", to, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.stdout;
    assert!(
        out.starts_with(&format!("✓ restored — {to} (5 bytes")),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&here).unwrap(), "a v0\n");
    std::fs::write(&here, "edited on the desk\n").unwrap();
    let r = restore_laptops(&b, "2", to, &[]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("the file exists (pass --force"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&here).unwrap(),
        "edited on the desk\n"
    );
    assert_eq!(restore_laptops(&b, "2", to, &["--force"]).code, 0);
    assert_eq!(std::fs::read_to_string(&here).unwrap(), "b v0\n");
    let r = restore_laptops(&b, "3", to, &[]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no earlier contents"), "{}", r.stderr);

    // The laptop rewinds to seq 2 and pushes: not an error, nothing new.
    let out = run_ok(&a, &["rewind", "--yes", "2"]);
    assert_eq!(
        out,
        format!(
            "✓ deleted (was newly created) — {}\n✓ restored — {}\n",
            at("c.py"),
            at("b.py")
        )
    );
    assert_eq!(
        std::fs::read_to_string(a.home().join("checkpoints/journal.jsonl")).unwrap(),
        l1
    );
    let pushed = a.sync_ok(&["push"]);
    assert!(pushed.contains(" 0 journal lines"), "{pushed}");
    // eVi goes on, numbering from 2 again.
    let (l2b, _) = checkpoint(&a, 2, &at("d.py"), "d v0\n");
    a.append("checkpoints/journal.jsonl", l2b.as_bytes());
    let pushed = a.sync_ok(&["push"]);
    assert!(pushed.contains(" 1 journal lines"), "{pushed}");
    a.sync_ok(&["pull"]);
    assert_eq!(
        std::fs::read_to_string(a.home().join("checkpoints/journal.jsonl")).unwrap(),
        l1.clone() + &l2b,
        "a pull never touches this device's own journal"
    );
    assert_eq!(run_ok(&a, &["rewind", "--list"]).lines().count(), 2);

    // The desk keeps the history: the rewound lines stay, the new one
    // joins, and seq 2 now means the newest of the two.
    b.sync_ok(&["pull"]);
    let listing = laptops_listing(&b);
    assert_eq!(seqs(&listing), [2, 3, 2, 1]);
    // So does the server: a device that joins now gets all of it.
    let c = Device::new();
    c.join_copying_key(&a, &server.url, "alice", "tower");
    c.sync_ok(&["pull"]);
    assert_eq!(seqs(&laptops_listing(&c)), [2, 3, 2, 1]);
    assert!(listing["checkpoints"][0]["blob_here"].as_bool().unwrap());
    let r = restore_laptops(&b, "2", to, &["--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("seq 2 appears 2 times"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&here).unwrap(), "d v0\n");
    // Its own (empty) journal is its own business.
    let r = b.evi(&["rewind", "--yes"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("there is no checkpoint to rewind"),
        "{}",
        r.stderr
    );
}
