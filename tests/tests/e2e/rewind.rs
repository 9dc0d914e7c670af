//! `evi rewind` on generated journals (issue 14): the list, undoing the
//! latest write and every write from a seq across `modify`, `create` and
//! `skip`, what happens when a blob is missing or a file cannot be written,
//! a dry run, the file's mode, and a journal trim that a SIGKILL can only
//! leave old or new.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::common::{Device, Rng, Run, Tree, tree};
use crate::sync_journal::checkpoint;

/// A device whose journal the test writes, and a project folder of files
/// that journal names.
struct Project {
    dev: Device,
    lines: Vec<String>,
}

impl Project {
    fn new() -> Self {
        let dev = Device::new();
        std::fs::create_dir_all(dev.dir.path().join("proj")).unwrap();
        Self {
            dev,
            lines: Vec::new(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dev.dir.path().join("proj").join(rel)
    }

    fn shown(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    /// eVi overwrote `rel` (which held `before`) with `after`.
    fn modify(&mut self, seq: u32, rel: &str, before: &str, after: &str) {
        let (line, _) = checkpoint(&self.dev, seq, &self.shown(rel), before);
        std::fs::write(self.path(rel), after).unwrap();
        self.lines.push(line);
    }

    /// eVi created `rel` holding `bytes`.
    fn create(&mut self, seq: u32, rel: &str, bytes: &str) {
        std::fs::write(self.path(rel), bytes).unwrap();
        self.lines.push(format!(
            "{{\"seq\":{seq},\"ts\":\"2026-06-08T10:00:{seq:02}Z\",\"path\":\"{}\",\"op\":\"create\"}}\n",
            self.shown(rel)
        ));
    }

    /// eVi overwrote `rel`, too large to keep.
    fn skip(&mut self, seq: u32, rel: &str, after: &str) {
        std::fs::write(self.path(rel), after).unwrap();
        self.lines.push(format!(
            "{{\"seq\":{seq},\"ts\":\"2026-06-08T10:00:{seq:02}Z\",\"path\":\"{}\",\"op\":\"skip\",\"size\":6291456}}\n",
            self.shown(rel)
        ));
    }

    fn save(&self) {
        self.dev
            .put("checkpoints/journal.jsonl", self.lines.concat().as_bytes());
    }

    fn journal(&self) -> String {
        std::fs::read_to_string(self.dev.home().join("checkpoints/journal.jsonl")).unwrap()
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    fn evi(&self, args: &[&str]) -> Run {
        self.dev.evi(args)
    }

    /// The home and the project, for "nothing changed".
    fn snapshot(&self) -> (Tree, Tree) {
        (self.dev.tree("checkpoints"), tree(&self.path("")))
    }
}

/// The one every test starts from: five writes of three kinds.
fn five_writes() -> Project {
    let mut p = Project::new();
    p.modify(1, "app.py", "app v0\n", "app v1\n");
    p.create(2, "new.py", "brand new\n");
    p.modify(3, "app.py", "app v1\n", "app v2\n");
    p.skip(4, "data.bin", "huge v1\n");
    p.modify(5, "util.py", "util v0\n", "util v1\n");
    p.save();
    p
}

#[test]
fn list_shows_checkpoints_newest_first_with_skips_not_restorable() {
    let p = five_writes();
    let r = p.evi(&["rewind", "--list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = [
        format!("     5 2026-06-08 10:00:05 modify {}", p.shown("util.py")),
        format!(
            "     4 2026-06-08 10:00:04 skip   {}  (not restorable: not snapshotted)",
            p.shown("data.bin")
        ),
        format!("     3 2026-06-08 10:00:03 modify {}", p.shown("app.py")),
        format!("     2 2026-06-08 10:00:02 create {}", p.shown("new.py")),
        format!("     1 2026-06-08 10:00:01 modify {}", p.shown("app.py")),
    ];
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), want);

    let r = p.evi(&["rewind", "-l", "--limit", "2"]);
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), want[..2]);
    assert!(
        r.stderr.contains("3 older checkpoints not shown"),
        "{}",
        r.stderr
    );

    let r = p.evi(&["rewind", "--list", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["total"], 5);
    assert_eq!(v["device"], serde_json::Value::Null);
    let cps = v["checkpoints"].as_array().unwrap();
    let seqs: Vec<u64> = cps.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [5, 4, 3, 2, 1]);
    assert_eq!(cps[0]["ts"], "2026-06-08T10:00:05.000Z");
    assert_eq!(cps[0]["op"], "modify");
    assert_eq!(cps[0]["restorable"], true);
    assert_eq!(cps[0]["blob_here"], true);
    assert_eq!(cps[1]["restorable"], false);
    assert_eq!(cps[1]["not_restorable"], "not snapshotted");
    assert_eq!(cps[3]["op"], "create");
    assert_eq!(cps[3]["restorable"], true);

    // Today's checkpoints show the time alone, as eVi shows them.
    let now = chrono::Utc::now();
    p.dev.append(
        "checkpoints/journal.jsonl",
        format!(
            "{{\"seq\":6,\"ts\":\"{}\",\"path\":\"{}\",\"op\":\"create\"}}\n",
            now.to_rfc3339(),
            p.shown("today.py")
        )
        .as_bytes(),
    );
    let r = p.evi(&["rewind", "--list", "--limit", "1"]);
    assert_eq!(
        r.stdout,
        format!(
            "     6 {} create {}\n",
            now.format("%H:%M:%S"),
            p.shown("today.py")
        )
    );

    // Nothing to list is not an error.
    let empty = Project::new();
    let r = empty.evi(&["rewind", "--list"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    assert!(r.stderr.contains("no checkpoints in"), "{}", r.stderr);
}

#[test]
fn rewind_undoes_the_latest_write_then_goes_further_back() {
    let p = five_writes();
    let r = p.evi(&["rewind", "--yes"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("✓ restored — {}\n", p.shown("util.py")));
    assert_eq!(p.read("util.py").as_deref(), Some("util v0\n"));
    assert_eq!(
        p.read("app.py").as_deref(),
        Some("app v2\n"),
        "only the latest"
    );
    assert_eq!(p.journal(), p.lines[..4].concat());

    // `0` is the latest too: now the skip, which cannot be undone (exit 1)
    // but leaves the journal, so the next rewind goes on.
    let r = p.evi(&["rewind", "--yes", "0"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stdout,
        format!(
            "✗ could not restore (not snapshotted) — {}\n",
            p.shown("data.bin")
        )
    );
    assert_eq!(p.read("data.bin").as_deref(), Some("huge v1\n"));
    assert_eq!(p.journal(), p.lines[..3].concat());
    let r = p.evi(&["rewind", "--yes"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(p.read("app.py").as_deref(), Some("app v1\n"));
    assert_eq!(p.journal(), p.lines[..2].concat());
}

#[test]
fn rewind_from_a_seq_undoes_modify_create_and_skip_newest_first_and_keeps_modes() {
    let p = five_writes();
    std::fs::set_permissions(p.path("app.py"), std::fs::Permissions::from_mode(0o751)).unwrap();
    let r = p.evi(&["rewind", "--yes", "2"]);
    assert_eq!(r.code, 1, "the skip could not be undone: {}", r.stderr);
    assert_eq!(
        r.stdout.lines().collect::<Vec<_>>(),
        [
            format!("✓ restored — {}", p.shown("util.py")),
            format!(
                "✗ could not restore (not snapshotted) — {}",
                p.shown("data.bin")
            ),
            format!("✓ restored — {}", p.shown("app.py")),
            format!("✓ deleted (was newly created) — {}", p.shown("new.py")),
        ]
    );
    assert!(r.stderr.contains("undid 3 of 4 writes"), "{}", r.stderr);
    assert!(
        r.stderr.contains("error: 1 write could not be undone"),
        "{}",
        r.stderr
    );
    assert_eq!(p.read("util.py").as_deref(), Some("util v0\n"));
    assert_eq!(
        p.read("app.py").as_deref(),
        Some("app v1\n"),
        "as before seq 3"
    );
    assert_eq!(p.read("new.py"), None);
    let mode = std::fs::metadata(p.path("app.py"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751, "the restored file keeps its mode");
    assert_eq!(p.journal(), p.lines[0], "every line from seq 2 is gone");
    // No temp file anywhere.
    let (cp, proj) = p.snapshot();
    for rel in cp.keys().chain(proj.keys()) {
        assert!(!rel.contains(".evi-tmp-"), "left behind: {rel}");
    }

    let r = p.evi(&["rewind", "--yes", "7"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("no checkpoint has seq 7 or later (the latest is 1)"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_missing_blob_is_reported_the_rest_is_done_and_it_stays_for_another_try() {
    let p = five_writes();
    // The blob of seq 3 (app.py's "app v1") is not on this device.
    let sha3: String = serde_json::from_str::<serde_json::Value>(&p.lines[2]).unwrap()["blob"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = p.dev.home().join("checkpoints/blobs").join(&sha3);
    let bytes = std::fs::read(&blob).unwrap();
    std::fs::remove_file(&blob).unwrap();
    let r = p.evi(&["rewind", "--yes", "3"]);
    assert_eq!(r.code, 1);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], format!("✓ restored — {}", p.shown("util.py")));
    assert_eq!(
        lines[2],
        format!(
            "✗ could not restore (its checkpoint blob {} is not on this device) — {}",
            &sha3[..12],
            p.shown("app.py")
        )
    );
    assert!(
        r.stderr.contains("1 of them stays in the journal"),
        "{}",
        r.stderr
    );
    assert_eq!(p.read("util.py").as_deref(), Some("util v0\n"));
    assert_eq!(
        p.read("app.py").as_deref(),
        Some("app v2\n"),
        "left as it was"
    );
    // The skip and the restored write left; the failed one waits.
    assert_eq!(p.journal(), p.lines[0].clone() + &p.lines[1] + &p.lines[2]);

    // Once the blob is back (a pull brings it), the same rewind finishes.
    std::fs::write(&blob, bytes).unwrap();
    let r = p.evi(&["rewind", "--yes", "3"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("✓ restored — {}\n", p.shown("app.py")));
    assert_eq!(p.read("app.py").as_deref(), Some("app v1\n"));
    assert_eq!(p.journal(), p.lines[..2].concat());
}

/// Whether this process can write into a folder whose mode says it may
/// not (root can).
fn modes_bind(dir: &std::path::Path) -> bool {
    let probe = dir.join("probe");
    let bound = std::fs::write(&probe, b"").is_err();
    let _ = std::fs::remove_file(probe);
    bound
}

#[test]
fn an_unwritable_target_is_reported_and_the_rest_is_still_done() {
    let mut p = Project::new();
    // A path under a file: no one can write it, root included.
    std::fs::write(p.path("blocker"), b"a file, not a folder").unwrap();
    let blocked = format!("{}/inside.py", p.shown("blocker"));
    let (line, _) = checkpoint(&p.dev, 1, &blocked, "inside v0\n");
    p.lines.push(line);
    // A read-only folder with a read-only file in it.
    std::fs::create_dir(p.path("ro")).unwrap();
    p.modify(2, "ro/locked.py", "locked v0\n", "locked v1\n");
    std::fs::set_permissions(
        p.path("ro/locked.py"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    std::fs::set_permissions(p.path("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    let ro_binds = modes_bind(&p.path("ro"));
    p.modify(3, "ok.py", "ok v0\n", "ok v1\n");
    p.save();

    let r = p.evi(&["rewind", "--yes", "1"]);
    std::fs::set_permissions(p.path("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], format!("✓ restored — {}", p.shown("ok.py")));
    assert!(
        lines[2].starts_with("✗ could not restore (there is no folder ")
            && lines[2].ends_with(&format!("blocker) — {blocked}")),
        "{}",
        lines[2]
    );
    assert_eq!(p.read("ok.py").as_deref(), Some("ok v0\n"));
    assert_eq!(p.read("blocker").as_deref(), Some("a file, not a folder"));
    if ro_binds {
        assert!(
            lines[1].starts_with("✗ could not restore (Permission denied"),
            "{}",
            lines[1]
        );
        assert_eq!(p.read("ro/locked.py").as_deref(), Some("locked v1\n"));
        assert_eq!(p.journal(), p.lines[0].clone() + &p.lines[1]);
    } else {
        // Root writes through modes: the read-only file is put back, and
        // keeps its mode.
        eprintln!("note: running as root, a read-only folder does not stop the restore");
        assert_eq!(
            lines[1],
            format!("✓ restored — {}", p.shown("ro/locked.py"))
        );
        let mode = std::fs::metadata(p.path("ro/locked.py"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o444);
        assert_eq!(p.journal(), p.lines[0]);
    }
}

#[test]
fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let p = five_writes();
    let before = p.snapshot();
    let r = p.evi(&["rewind", "2", "--dry-run"]);
    assert_eq!(r.code, 1, "the skip would fail: {}", r.stderr);
    assert_eq!(
        r.stdout.lines().collect::<Vec<_>>(),
        [
            format!("would restore — {}", p.shown("util.py")),
            format!(
                "✗ could not restore (not snapshotted) — {}",
                p.shown("data.bin")
            ),
            format!("would restore — {}", p.shown("app.py")),
            format!("would delete (was newly created) — {}", p.shown("new.py")),
        ]
    );
    assert!(
        r.stderr.starts_with("dry run: nothing is changed"),
        "{}",
        r.stderr
    );
    assert!(before == p.snapshot(), "a dry run changed files");
    assert_eq!(p.journal(), p.lines.concat());
}

#[test]
fn a_journal_evi_is_still_writing_is_not_rewound() {
    let p = five_writes();
    p.dev.append(
        "checkpoints/journal.jsonl",
        b"{\"seq\":6,\"ts\":\"2026-06-08T10",
    );
    let before = p.snapshot();
    let r = p.evi(&["rewind", "--yes"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("ends in a line eVi is still writing"),
        "{}",
        r.stderr
    );
    assert!(before == p.snapshot());
}

/// Writes `n` checkpoint lines, the last one eVi's creation of `last`.
fn big_journal(n: usize, last: &str) -> Vec<u8> {
    let mut text = String::with_capacity(n * 140);
    for seq in 1..n {
        text.push_str(&format!(
            "{{\"seq\":{seq},\"ts\":\"2026-06-08T10:00:00Z\",\"path\":\"/nowhere/src/module_{seq:07}.rs\",\"op\":\"create\"}}\n"
        ));
    }
    text.push_str(&format!(
        "{{\"seq\":{n},\"ts\":\"2026-06-08T10:00:00Z\",\"path\":\"{last}\",\"op\":\"create\"}}\n"
    ));
    text.into_bytes()
}

/// Temp files a rewind writes its new journal to, in `checkpoints/`.
fn temps(p: &Project) -> Vec<String> {
    std::fs::read_dir(p.dev.home().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".evi-tmp-"))
        .collect()
}

#[test]
fn sigkill_during_the_trim_leaves_the_old_journal_or_the_new_one() {
    let p = Project::new();
    let last = p.shown("fresh.py");
    let old = big_journal(150_000, &last);
    let cut = old[..old.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let new = old[..cut].to_vec();
    let path = p.dev.home().join("checkpoints/journal.jsonl");
    let mut rng = Rng::new(14);
    let (mut killed_mid_trim, mut finished) = (0, 0);
    for round in 0..20 {
        p.dev.put("checkpoints/journal.jsonl", &old);
        std::fs::write(p.path("fresh.py"), b"created by eVi\n").unwrap();
        let stale = temps(&p);
        let mut child = p
            .dev
            .cmd()
            .args(["rewind", "--yes"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait for the trim to begin (its temp file appears), then kill at
        // a random point inside it.
        let mut began = false;
        while child.try_wait().unwrap().is_none() {
            if temps(&p).iter().any(|t| !stale.contains(t)) {
                began = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        if began {
            std::thread::sleep(std::time::Duration::from_micros(rng.range(0, 20_000)));
        }
        let _ = child.kill();
        child.wait().unwrap();
        let now = std::fs::read(&path).unwrap();
        assert!(
            now == old || now == new,
            "round {round}: the journal is neither the old nor the new one ({} bytes; old {}, new {})",
            now.len(),
            old.len(),
            new.len()
        );
        if now == old {
            killed_mid_trim += 1;
        } else {
            finished += 1;
        }
    }
    eprintln!("{killed_mid_trim} rounds killed before the rename, {finished} after");
    assert!(killed_mid_trim > 0, "no kill landed inside the trim");

    // What a kill left behind goes with the next rewind, which finishes.
    p.dev.put("checkpoints/journal.jsonl", &old);
    std::fs::write(p.path("fresh.py"), b"created by eVi\n").unwrap();
    let r = p.evi(&["rewind", "--yes"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("✓ deleted (was newly created) — {last}\n")
    );
    assert!(std::fs::read(&path).unwrap() == new);
    assert_eq!(temps(&p), Vec::<String>::new());
}

#[test]
fn rewind_asks_first_and_needs_yes_without_a_terminal() {
    let p = five_writes();
    let before = p.snapshot();
    let r: Run = p
        .dev
        .cmd()
        .args(["rewind", "3"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
        .into();
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            format!(
                "error: this undoes 2 writes, to {}, {}: each file gets back the bytes it had \
                 before (one eVi created is deleted), and the journal forgets them\n\
                 hint: run it on a terminal to be asked, or pass --yes to undo anyway\n",
                p.shown("util.py"),
                p.shown("app.py")
            )
            .as_str()
        )
    );
    assert_eq!(p.snapshot(), before, "nothing undone");

    // On a terminal: asked; anything but yes undoes nothing.
    let r = crate::first_hour_rows::on_terminal(&p.dev, "rewind", "no\n");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "this undoes the write to {}: each file gets back the bytes it had before (one eVi \
             created is deleted), and the journal forgets it. Undo? [y/N] ",
            p.shown("util.py")
        )) && r.stdout.contains("nothing undone"),
        "{r:?}"
    );
    assert_eq!(p.snapshot(), before, "nothing undone");
    let r = crate::first_hour_rows::on_terminal(&p.dev, "rewind", "y\n");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.read("util.py").as_deref(), Some("util v0\n"));
    // A dry run changes nothing: not asked.
    let r: Run = p
        .dev
        .cmd()
        .args(["rewind", "1", "--dry-run"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 1, "the skip cannot be undone: {}", r.stderr);
    assert!(r.stdout.contains("would restore"), "{}", r.stdout);
}
