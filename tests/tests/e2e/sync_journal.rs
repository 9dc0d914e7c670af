//! Checkpoint journals between devices (issue 8, defect 1; DESIGN.md:
//! journals are identified by the server's device id, a line by its content
//! and its device). Two machines called `laptop` both keep every line, and a
//! journal trimmed by a rewind, whose later lines reuse numbers, still brings
//! its new lines to every other device.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::common::{Device, TestServer, Tree};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One journal line naming a blob it also stores on `dev`; returns the line
/// (with its newline) and the blob's name and bytes.
pub fn checkpoint(
    dev: &Device,
    seq: u32,
    path: &str,
    contents: &str,
) -> (String, (String, Vec<u8>)) {
    let blob = contents.as_bytes().to_vec();
    let sha = hex(&Sha256::digest(&blob));
    dev.put(&format!("checkpoints/blobs/{sha}"), &blob);
    let line = format!(
        "{{\"seq\":{seq},\"ts\":\"2026-06-08T10:00:{seq:02}Z\",\"path\":\"{path}\",\"op\":\"modify\",\"blob\":\"{sha}\",\"size\":{}}}\n",
        blob.len()
    );
    (line, (sha, blob))
}

/// Every pulled journal of `dev`: path under `checkpoints/` → its lines.
fn pulled(cp: &Tree) -> BTreeMap<String, Vec<String>> {
    cp.iter()
        .filter(|(rel, _)| rel.starts_with("devices/") && rel.ends_with("/journal.jsonl"))
        .map(|(rel, bytes)| {
            let text = String::from_utf8(bytes.clone().expect("a file")).unwrap();
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "{rel} ends mid-line"
            );
            (
                rel.clone(),
                text.lines().map(|l| format!("{l}\n")).collect(),
            )
        })
        .collect()
}

/// `lines` are exactly the lines of one of `journals`, each once.
fn one_journal_holds<'a>(
    journals: &'a BTreeMap<String, Vec<String>>,
    lines: &[String],
    whose: &str,
) -> &'a str {
    let (rel, got) = journals
        .iter()
        .find(|(_, got)| got.contains(&lines[0]))
        .unwrap_or_else(|| panic!("{whose}'s first line was not pulled: {journals:#?}"));
    let mut got_sorted = got.clone();
    got_sorted.sort();
    let mut want = lines.to_vec();
    want.sort();
    assert_eq!(got_sorted, want, "{whose}'s journal in {rel}");
    rel
}

#[test]
fn twin_device_names_and_a_rewound_journal_keep_every_line() {
    let server = TestServer::start();
    let (d1, d2, d3) = (Device::new(), Device::new(), Device::new());
    // Two machines with the same name (the server may rename the second,
    // `laptop-2`: either way both journals must arrive whole).
    d1.init(&server, "alice", "laptop");
    d2.join_copying_key(&d1, &server.url, "alice", "laptop");

    let mut blobs = Vec::new();
    let mut d1_lines = Vec::new();
    for (seq, path) in [(1, "/p/a.py"), (2, "/p/b.py"), (3, "/p/c.py")] {
        let (line, blob) = checkpoint(&d1, seq, path, &format!("d1 before {path}\n"));
        d1_lines.push(line);
        blobs.push(blob);
    }
    let mut d2_lines = Vec::new();
    for (seq, path) in [(1, "/q/a.py"), (2, "/q/b.py")] {
        let (line, blob) = checkpoint(&d2, seq, path, &format!("d2 before {path}\n"));
        d2_lines.push(line);
        blobs.push(blob);
    }
    d1.put("checkpoints/journal.jsonl", d1_lines.concat().as_bytes());
    d2.put("checkpoints/journal.jsonl", d2_lines.concat().as_bytes());
    d1.sync_ok(&["push"]);
    d2.sync_ok(&["push"]);

    // d1 rewinds to its first checkpoint: the journal keeps only line 1,
    // then grows again with lines whose numbers repeat the removed ones.
    d1.put("checkpoints/journal.jsonl", d1_lines[0].as_bytes());
    for (seq, path) in [(2, "/p/d.py"), (3, "/p/e.py")] {
        let (line, blob) = checkpoint(&d1, seq, path, &format!("d1 after rewind {path}\n"));
        d1.append("checkpoints/journal.jsonl", line.as_bytes());
        d1_lines.push(line);
        blobs.push(blob);
    }
    d1.sync_ok(&["push"]);

    // A third device gets every line either device ever pushed, each once,
    // each device's in its own journal, and every blob they name.
    d3.join_copying_key(&d1, &server.url, "alice", "server");
    d3.sync_ok(&["pull"]);
    let cp = d3.tree("checkpoints");
    let journals = pulled(&cp);
    assert_eq!(journals.len(), 2, "one journal per device: {journals:#?}");
    let j1 = one_journal_holds(&journals, &d1_lines, "d1");
    let j2 = one_journal_holds(&journals, &d2_lines, "d2");
    assert_ne!(j1, j2);
    for (sha, bytes) in &blobs {
        assert_eq!(
            cp.get(&format!("blobs/{sha}")),
            Some(&Some(bytes.clone())),
            "blob {sha}"
        );
    }

    // Pulling again appends nothing.
    for _ in 0..2 {
        d3.sync_ok(&["pull"]);
        assert!(
            d3.tree("checkpoints") == cp,
            "a second pull changed checkpoints"
        );
    }

    // Each twin holds the other's journal, never its own.
    for (dev, other, whose) in [(&d1, &d2_lines, "d2"), (&d2, &d1_lines, "d1")] {
        dev.sync_ok(&["pull"]);
        let journals = pulled(&dev.tree("checkpoints"));
        assert_eq!(journals.len(), 1, "only the other's journal: {journals:#?}");
        one_journal_holds(&journals, other, whose);
    }
}
