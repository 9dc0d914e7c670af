//! `evi sync watch` on real devices: two watchers converge while eVi-like
//! writers append; they catch up after the server restarts under them
//! (said once each way); a watcher killed mid-push resumes cleanly; one
//! watcher per home, shown by `evi sync status`; `--install` writes a unit
//! systemd accepts. Short quiet times and waits keep these quick; the
//! waits below are for a state to be reached, never a speed asserted.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    Device, Rng, TestServer, assert_all_lines_json, held, held_set, sessions, today, two_devices,
};

/// A running `evi sync watch --json`, killed when dropped.
pub(crate) struct Watcher {
    pub(crate) child: Child,
    out: PathBuf,
    err: PathBuf,
}

fn watch(dev: &Device) -> Watcher {
    // No scan while a test runs: what arrives came by the file events and
    // the server's long poll.
    watch_with(dev, &["--scan-secs", "600", "--backoff-max-secs", "1"])
}

pub(crate) fn watch_with(dev: &Device, flags: &[&str]) -> Watcher {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = dev.dir.path().join(format!("watch-{n}.jsonl"));
    let err = dev.dir.path().join(format!("watch-{n}.stderr"));
    let child = dev
        .sync_cmd()
        .args([
            "sync",
            "watch",
            "--json",
            "--quiet-ms",
            "100",
            "--wait-secs",
            "10",
        ])
        .args(flags)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start evi sync watch");
    let w = Watcher { child, out, err };
    until("the watcher starts", 10, || {
        w.events().iter().any(|e| e["event"] == "started")
    });
    w
}

impl Watcher {
    pub(crate) fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub(crate) fn count(&self, event: &str) -> usize {
        self.events().iter().filter(|e| e["event"] == event).count()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Whether the process still runs.
    pub(crate) fn child_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, as a crash or `kill -9` stops it.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 100 ms until it holds; fails after `secs`.
pub(crate) fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// User and system CPU time of a watcher so far, in clock ticks.
fn cpu_ticks(w: &Watcher) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", w.child.id())).unwrap();
    // After the command name in parentheses: fields 14 and 15 of stat(5).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

pub(crate) fn converged(a: &Device, b: &Device) -> bool {
    let s = sessions(a);
    s == sessions(b) && s.iter().all(|s| held_set(a, s) == held_set(b, s))
}

fn no_entry_twice(dev: &Device) {
    for s in sessions(dev) {
        let all = held(dev, &s);
        let ids: std::collections::BTreeSet<&str> = all.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids.len(), all.len(), "{s}: an entry is there twice");
    }
}

pub(crate) fn line(what: &str, i: usize) -> String {
    format!(
        "{{\"role\":\"assistant\",\"content\":\"{what} {i}\",\"ts\":\"{}T10:00:00Z\"}}\n",
        today()
    )
}

/// What eVi does: lines of its own session written in two parts with a
/// pause between (a partial last line meanwhile), and whole lines to a
/// session the other device writes too.
fn write_like_evi(dev: &Device, own: &str, shared: &str, n: usize) {
    let day = today();
    let (own_file, shared_file) = (
        format!("transcripts/{day}/{own}.jsonl"),
        format!("transcripts/{day}/{shared}.jsonl"),
    );
    for i in 0..n {
        let l = line(own, i);
        let (first, rest) = l.split_at(l.len() / 2);
        dev.append(&own_file, first.as_bytes());
        std::thread::sleep(Duration::from_millis(40));
        dev.append(&own_file, rest.as_bytes());
        dev.append(&shared_file, line(own, i).as_bytes());
        std::thread::sleep(Duration::from_millis(30));
    }
}

#[test]
fn two_watching_devices_converge_while_writers_append() {
    let (_server, a, b) = two_devices();
    let wa = watch(&a);
    let wb = watch(&b);

    // One watcher per home, and status says which.
    let run = a.sync(&["sync", "watch"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with(&format!(
            "error: another evi sync watch is running in this home (pid {})",
            wa.child.id()
        )),
        "{}",
        run.stderr
    );
    let status = a.sync_ok(&["status"]);
    assert!(
        status.contains(&format!("watcher:   running (pid {})", wa.child.id())),
        "{status}"
    );
    let v: Value = serde_json::from_str(&a.sync_ok(&["status", "--json"])).unwrap();
    assert_eq!(v["watcher"]["pid"], wa.child.id());

    std::thread::scope(|scope| {
        scope.spawn(|| write_like_evi(&a, "LAPTOPONLY", "SHARED", 25));
        scope.spawn(|| write_like_evi(&b, "DESKTOPONLY", "SHARED", 25));
    });
    until("the devices converge", 30, || converged(&a, &b));
    assert_eq!(
        sessions(&a),
        ["DESKTOPONLY", "LAPTOPONLY", "SHARED"]
            .map(String::from)
            .into()
    );
    assert_eq!(held(&b, "LAPTOPONLY").len(), 25);
    assert_eq!(held(&a, "SHARED").len(), 50);
    for d in [&a, &b] {
        no_entry_twice(d);
        // A half-written line never went anywhere as a line of its own.
        assert_all_lines_json(d, "after watching");
    }
    for w in [&wa, &wb] {
        // A pull's line is written once its entries are in place.
        until("each logged a push and a pull", 10, || {
            w.count("pushed") > 0 && w.count("pulled") > 0
        });
        assert!(
            w.count("pushed") > 0 && w.count("pulled") > 0,
            "{:?} {}",
            w.events(),
            w.stderr()
        );
        assert_eq!(
            w.count("failed") + w.count("server_away"),
            0,
            "{:?} {}",
            w.events(),
            w.stderr()
        );
    }
    // A manual push beside the watcher works (and finds nothing left).
    let out: Value = serde_json::from_str(&a.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(out["entries"], 0);
}

#[test]
fn watchers_catch_up_after_the_server_restarts_under_them() {
    let (mut server, a, b) = two_devices();
    let wa = watch(&a);
    let wb = watch(&b);
    let day = today();
    let path = |s: &str| format!("transcripts/{day}/{s}.jsonl");
    for i in 0..5 {
        a.append(&path("BEFORE"), line("before", i).as_bytes());
    }
    until("the first lines arrive", 20, || converged(&a, &b));

    server.kill();
    for i in 0..5 {
        a.append(&path("DURING"), line("laptop", i).as_bytes());
        b.append(&path("DURING2"), line("desktop", i).as_bytes());
    }
    until("both notice the server is gone", 20, || {
        wa.count("server_away") == 1 && wb.count("server_away") == 1
    });
    // Some more backoff rounds while it is down: still said once.
    std::thread::sleep(Duration::from_secs(2));
    server.restart();
    until("the devices catch up", 30, || converged(&a, &b));
    for (w, name) in [(&wa, "laptop"), (&wb, "desktop")] {
        until("the return is said", 10, || w.count("server_back") == 1);
        assert_eq!(w.count("server_away"), 1, "{name}: {:?}", w.events());
        no_entry_twice(if name == "laptop" { &a } else { &b });
    }
    assert_eq!(held(&b, "DURING").len(), 5);
    assert_eq!(held(&a, "DURING2").len(), 5);
    let st = server.get_json(&a.token(), "status");
    assert_eq!(st["entries"], 15, "{st}");
}

#[test]
fn a_watcher_waiting_for_its_server_costs_no_cpu() {
    let (mut server, a, _b) = two_devices();
    // A scan falls due during a backoff of several seconds.
    let w = watch_with(&a, &["--scan-secs", "1", "--backoff-max-secs", "8"]);
    server.kill();
    a.append(
        &format!("transcripts/{}/AWAY.jsonl", today()),
        line("away", 0).as_bytes(),
    );
    until("it notices the server is gone", 20, || {
        w.count("server_away") == 1
    });
    let before = cpu_ticks(&w);
    std::thread::sleep(Duration::from_secs(4));
    let used = cpu_ticks(&w) - before;
    // A loop that spins until its retry burns about 100 ticks a second.
    assert!(
        used < 40,
        "a waiting watcher spent {used} ticks of CPU in 4 s"
    );
}

#[test]
fn a_watcher_killed_mid_push_resumes_cleanly() {
    let (server, a, b) = two_devices();
    let day = today();
    let mut total = 0;
    for s in 0..150 {
        let lines: String = (0..12).map(|i| line(&format!("s{s}"), i)).collect();
        a.write(&day, &format!("S{s:03}"), lines.as_bytes());
        total += 12;
    }
    let mut rng = Rng::new(13);
    for _ in 0..4 {
        let w = watch(&a);
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
        w.kill();
    }
    let w = watch(&a);
    until("everything is pushed", 60, || {
        server.get_json(&a.token(), "status")["entries"] == total
    });
    until("the watcher is idle", 20, || {
        let v: Value = serde_json::from_str(&a.sync_ok(&["status", "--json"])).unwrap();
        v["local_changed_files"] == 0
    });
    drop(w);
    b.sync_ok(&["pull"]);
    assert!(
        converged(&a, &b),
        "the killed pushes lost or changed something"
    );
    no_entry_twice(&b);
    let out: Value = serde_json::from_str(&a.sync_ok(&["push", "--json"])).unwrap();
    assert_eq!(out["entries"], 0, "{out}");
}

#[test]
fn install_writes_a_unit_systemd_accepts_and_uninstall_removes_it() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    // The test's `evi` is in target/release, which the unit must not run:
    // an installed copy on PATH is what it runs instead.
    let installed = crate::first_hour_rows::install_evi(&a);
    let run = a
        .sync_cmd()
        .env("PATH", installed.path)
        .args(["sync", "watch", "--install", "--no-enable"])
        .output()
        .unwrap();
    let run = crate::common::Run::from(run);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let units = a.dir.path().join(".config/systemd/user");
    let files: Vec<PathBuf> = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    let name = file.file_stem().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with("evi-sync-watch-"), "{name}");
    assert_eq!(
        run.stdout,
        format!(
            "wrote {} ({name})\nenable it with:\n  systemctl --user daemon-reload\n  \
             systemctl --user enable --now {name}.service\n",
            file.display()
        )
    );
    let unit = std::fs::read_to_string(file).unwrap();
    let evi = installed.evi;
    assert_eq!(
        run.stderr,
        format!(
            "the service runs {} (the evi on PATH), not this build's {}\n",
            evi.display(),
            crate::common::bin("evi").display()
        )
    );
    for want in [
        format!("ExecStart=\"{}\" sync watch", evi.display()),
        format!("Environment=\"EVI_HOME={}\"", a.home().display()),
        "Restart=on-failure".to_owned(),
        "WantedBy=default.target".to_owned(),
    ] {
        assert!(unit.lines().any(|l| l == want), "{want:?} in\n{unit}");
    }
    let sections: Vec<&str> = unit.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(sections, ["[Unit]", "[Service]", "[Install]"]);
    match std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(file)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "systemd-analyze verify: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("systemd-analyze is needed in CI (.ci/run installs systemd): {e}")
        }
        Err(e) => {
            eprintln!("skipping systemd-analyze verify (not installed: {e}); the unit was parsed")
        }
    }

    let run = a.sync(&["sync", "watch", "--uninstall"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with(&format!("removed {}\n", file.display())),
        "{}",
        run.stdout
    );
    assert!(!file.exists());
    let run = a.sync(&["sync", "watch", "--uninstall"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("no service is installed for this home"),
        "{}",
        run.stdout
    );
}

#[test]
fn handoff_with_auto_sync_relies_on_the_watcher_and_pushes_what_it_has_not() {
    let (_server, a, b) = two_devices();
    a.write_config("[sync]\nauto = true\n");
    let wa = watch(&a);
    let _wb = watch(&b);
    let path = format!("transcripts/{}/HANDED.jsonl", today());
    a.append(&path, line("handed", 0).as_bytes());
    until("the session reaches the desktop", 20, || converged(&a, &b));
    until("the watcher recorded its push", 10, || {
        a.evi(&["sessions", "handoff", "HANDED", "--json"])
            .stdout
            .contains("\"push\": \"watcher\"")
    });
    let run = a.evi(&["sessions", "handoff", "HANDED"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let steps: Vec<&str> = run.stdout.lines().take(3).collect();
    assert_eq!(
        steps,
        [
            "handoff HANDED (1 messages)",
            "  1. sync this device:   evi sync watch   (already pushed)",
            "  2. on the other device: nothing if it runs `evi sync watch` (it has the session \
             already); else evi sync pull, then either",
        ]
    );

    // No watcher here any more: a new line is pushed by the handoff itself.
    wa.kill();
    a.append(&path, line("handed", 1).as_bytes());
    let v: Value =
        serde_json::from_str(&a.evi(&["sessions", "handoff", "HANDED", "--json"]).stdout).unwrap();
    assert_eq!(v["push"], "done", "{v}");
    until("the desktop, still watching, has it", 20, || {
        converged(&a, &b)
    });
}
