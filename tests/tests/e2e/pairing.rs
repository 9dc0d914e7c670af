//! Pairing a device by short code (`evi sync pair` on a device that syncs,
//! `evi sync join CODE --server URL` on the new one), with the real server
//! and two or three homes: the joined device syncs; a wrong code, an
//! expired code, and two pairings at once for one account; and what the
//! server stores and logs holds neither the identity nor the code.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, ChildStdout, Stdio};

use serde_json::Value;

use crate::common::{Device, Run, TestServer, today, tree};

/// `evi sync pair --yes --json` running on a device, its code read from
/// the first line it printed.
pub(crate) struct Pairing {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pub(crate) code: String,
}

impl Pairing {
    pub(crate) fn start(dev: &Device, extra: &[&str]) -> Self {
        let mut child = dev
            .sync_cmd()
            .args(["sync", "pair", "--yes", "--json"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run evi sync pair");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let v: Value = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("first line of pair --json ({e}): {first:?}"));
        let code = v["code"].as_str().expect("a code").to_owned();
        assert!(v["expires_at"].is_string(), "{v}");
        Self {
            child,
            stdout,
            code,
        }
    }

    /// Waits for it to end: its exit code, its outcome line, its stderr.
    pub(crate) fn end(mut self) -> (i32, Value, String) {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        let out = self.child.wait_with_output().unwrap();
        let outcome = serde_json::from_str(rest.trim()).unwrap_or(Value::Null);
        (
            out.status.code().unwrap_or(-1),
            outcome,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

pub(crate) fn join(dev: &Device, code: &str, srv: &TestServer, name: &str) -> Run {
    dev.sync(&[
        "sync", "join", code, "--server", &srv.url, "--name", name, "--json",
    ])
}

fn device_names(dev: &Device, srv: &TestServer) -> Vec<String> {
    crate::common::sorted_device_names(&srv.get_json(&dev.token(), "devices"))
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The code with its last word swapped for another word of the list.
fn wrong(code: &str) -> String {
    let (head, last) = code.rsplit_once('-').unwrap();
    let other = if last == "tiger" { "willow" } else { "tiger" };
    format!("{head}-{other}")
}

/// `laptop`, the first device of `pat`, with a line pushed.
fn laptop_with_a_line(srv: &TestServer) -> Device {
    let a = Device::new();
    a.init(srv, "pat", "laptop");
    a.write(
        &today(),
        "from-laptop",
        b"{\"role\":\"user\",\"content\":\"hi from the laptop\"}\n",
    );
    a.sync_ok(&["push"]);
    a
}

/// The joined device `b` pulls the laptop's line, and its own reaches `a`.
fn syncs_both_ways(a: &Device, b: &Device) {
    let day_file = |dev: &Device, session: &str| {
        dev.home()
            .join("transcripts")
            .join(today())
            .join(format!("{session}.jsonl"))
    };
    b.sync_ok(&["pull"]);
    assert!(day_file(b, "from-laptop").is_file());
    b.write(
        &today(),
        "from-phone",
        b"{\"role\":\"user\",\"content\":\"hi from the phone\"}\n",
    );
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    assert!(day_file(a, "from-phone").is_file());
}

#[test]
fn a_device_joins_with_the_code_then_pushes_and_pulls_and_the_server_keeps_neither_key_nor_code() {
    let logs = tempfile::tempdir().unwrap();
    let srv = TestServer::start_logged(&[], &[("EVI_SERVER_LOG", "trace")], logs.path());
    let (a, b) = (laptop_with_a_line(&srv), Device::new());

    let pairing = Pairing::start(&a, &[]);
    let code = pairing.code.clone();
    let joined = join(&b, &code, &srv, "phone");
    assert_eq!(joined.code, 0, "join: {}", joined.stderr);
    let j: Value = serde_json::from_str(joined.stdout.trim()).unwrap();
    assert_eq!(
        (&j["outcome"], &j["user"], &j["device"]),
        (&"joined".into(), &"pat".into(), &"phone".into()),
        "{j}"
    );
    let (status, outcome, stderr) = pairing.end();
    assert_eq!(status, 0, "pair: {stderr}");
    assert_eq!(outcome["outcome"], "paired", "{outcome}");
    assert_eq!(outcome["device"], "phone", "{outcome}");

    // As `key import` + `login` leave a device: the same key, 0600 files.
    assert_eq!(
        std::fs::read_to_string(b.identity_path())
            .unwrap()
            .lines()
            .last(),
        std::fs::read_to_string(a.identity_path())
            .unwrap()
            .lines()
            .last()
    );
    assert_eq!(mode(&b.identity_path()), 0o600);
    assert_eq!(mode(&b.home().join("sync/token")), 0o600);
    assert_eq!(b.state()["account"]["device"], "phone");
    assert_eq!(device_names(&a, &srv), ["laptop", "phone"]);

    syncs_both_ways(&a, &b);

    // Neither the code (nor its words) nor the identity, nor the token
    // the pairing carried, is in what the server stores or logs.
    let identity = std::fs::read_to_string(a.identity_path()).unwrap();
    let secret = identity.lines().last().unwrap().to_owned();
    let words = code.split_once('-').unwrap().1.to_owned();
    let needles = [
        ("the code", code.clone()),
        ("the code's words", words),
        ("the identity", secret.clone()),
        ("the identity, lowercased", secret.to_lowercase()),
        ("the new device's token", b.token()),
    ];
    let mut hay: Vec<(String, Vec<u8>)> = vec![(
        "the database".into(),
        crate::metadata_audit::database_dump(&srv),
    )];
    let mut roots = srv.file_roots();
    roots.push((logs.path().to_owned(), "server output"));
    for (root, what) in &roots {
        for (rel, bytes) in tree(root) {
            if let Some(bytes) = bytes {
                hay.push((format!("{what}: {rel}"), bytes));
            }
        }
    }
    assert!(
        hay.iter()
            .any(|(w, b)| w.contains("stderr") && !b.is_empty()),
        "the server logged nothing"
    );
    let found: Vec<String> = needles
        .iter()
        .flat_map(|(what, needle)| {
            let finder = memchr::memmem::Finder::new(needle.as_bytes()).into_owned();
            hay.iter()
                .filter(move |(_, bytes)| finder.find(bytes).is_some())
                .map(move |(place, _)| format!("{what} in {place}"))
        })
        .collect();
    assert!(found.is_empty(), "the server keeps: {found:#?}");
}

#[test]
fn a_wrong_code_fails_both_sides_and_stores_nothing() {
    let srv = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    let pairing = Pairing::start(&a, &[]);
    let code = pairing.code.clone();
    let joined = join(&b, &wrong(&code), &srv, "phone");
    assert_eq!(joined.code, 1, "join: {joined:?}");
    assert!(
        joined.stderr.contains("ended the pairing") && joined.stderr.contains("nothing was stored"),
        "{}",
        joined.stderr
    );
    let (status, outcome, stderr) = pairing.end();
    assert_eq!(status, 1, "pair: {stderr}");
    assert_eq!(outcome["outcome"], "wrong_code", "{outcome}");
    assert!(stderr.contains("wrong code"), "{stderr}");

    // No device, no token, nothing in the new home.
    assert_eq!(device_names(&a, &srv), ["laptop"]);
    let sync = tree(&b.home().join("sync"));
    for kept in ["identity.txt", "token", "state.json"] {
        assert!(!sync.contains_key(kept), "{kept} in {:?}", sync.keys());
    }
    // One attempt per code: the right code, now, is refused too.
    let again = join(&b, &code, &srv, "phone");
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("used already"), "{}", again.stderr);
}

#[test]
fn an_expired_code_is_refused_and_the_pairing_says_so() {
    let srv = TestServer::start_with(&["--pair-ttl", "1"]);
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    let pairing = Pairing::start(&a, &[]);
    let code = pairing.code.clone();
    // The pairing ends by itself once its slot expires.
    let (status, outcome, stderr) = pairing.end();
    assert_eq!(status, 1, "pair: {stderr}");
    assert_eq!(outcome["outcome"], "expired", "{outcome}");
    assert!(stderr.contains("expired"), "{stderr}");
    let joined = join(&b, &code, &srv, "phone");
    assert_eq!(joined.code, 1, "{joined:?}");
    assert!(joined.stderr.contains("expired"), "{}", joined.stderr);
    assert_eq!(device_names(&a, &srv), ["laptop"]);
    assert!(!b.identity_path().exists());
}

#[test]
fn two_pairings_at_once_for_one_account() {
    let srv = TestServer::start();
    let (a, b, c) = (Device::new(), Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");
    let first = Pairing::start(&a, &[]);
    let second = Pairing::start(&a, &["--name", "tablet"]);
    let slot = |code: &str| code.split_once('-').unwrap().0.to_owned();
    assert_ne!(slot(&first.code), slot(&second.code));
    let (code_b, code_c) = (first.code.clone(), second.code.clone());
    let (jb, jc) = std::thread::scope(|s| {
        let jb = s.spawn(|| join(&b, &code_b, &srv, "phone"));
        let jc = s.spawn(|| join(&c, &code_c, &srv, "phone"));
        (jb.join().unwrap(), jc.join().unwrap())
    });
    assert_eq!((jb.code, jc.code), (0, 0), "{jb:?}\n{jc:?}");
    for p in [first, second] {
        let (status, outcome, stderr) = p.end();
        assert_eq!(
            (status, &outcome["outcome"]),
            (0, &"paired".into()),
            "{stderr}"
        );
    }
    assert_eq!(device_names(&a, &srv), ["laptop", "phone", "tablet"]);
    a.write(&today(), "s1", b"{\"role\":\"user\",\"content\":\"one\"}\n");
    a.sync_ok(&["push"]);
    for dev in [&b, &c] {
        dev.sync_ok(&["pull"]);
        assert!(
            dev.home()
                .join("transcripts")
                .join(today())
                .join("s1.jsonl")
                .is_file()
        );
    }
}

/// `evi sync pair --json` without `--yes`, on a pseudo-terminal as a person
/// runs it: util-linux `script -qfec CMD /dev/null` gives it one (its stdin,
/// stdout and stderr), and what the test writes to script's stdin is typed
/// on that terminal. Everything the terminal shows is kept.
struct PairOnTerminal {
    child: Child,
    stdin: std::process::ChildStdin,
    shown: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

/// `s` in single quotes for `sh -c`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl PairOnTerminal {
    fn start(dev: &Device) -> Self {
        let evi = dev.sync_cmd();
        let cmd = format!(
            "exec {} sync pair --json",
            sh_quote(&evi.get_program().to_string_lossy())
        );
        let mut script = std::process::Command::new("script");
        script
            .args(["-qfec", &cmd, "/dev/null"])
            .env_clear()
            .envs(evi.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .current_dir(evi.get_current_dir().unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = script.spawn().expect("run script (util-linux)");
        let stdin = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = shown.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                if n == 0 {
                    break;
                }
                keep.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self {
            child,
            stdin,
            shown,
        }
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap()).into_owned()
    }

    /// What the terminal shows once it shows `what` (fails after 20 s).
    fn wait_for(&self, what: &str) -> String {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let shown = self.shown();
            if shown.contains(what) {
                return shown;
            }
            assert!(
                std::time::Instant::now() < end,
                "the terminal never showed {what:?}; it shows {shown:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The code from the first JSON line.
    fn code(&self) -> String {
        let shown = self.wait_for("\"expires_at\"");
        let line = shown
            .lines()
            .find(|l| l.contains("\"code\""))
            .unwrap()
            .trim();
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        v["code"].as_str().unwrap().to_owned()
    }

    /// Types `line` and Enter.
    fn type_line(&mut self, line: &str) {
        use std::io::Write as _;
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        self.stdin.flush().unwrap();
    }

    /// Its exit code and everything the terminal showed.
    fn end(mut self) -> (i32, String) {
        let status = self.child.wait().unwrap();
        // The reader drains what is left once script closes the pty.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let shown = self.shown();
        drop(self.stdin);
        (status.code().unwrap_or(-1), shown)
    }
}

/// `evi sync join` started on `dev` (it waits for the other side).
fn join_started(dev: &Device, code: &str, srv: &TestServer, name: &str) -> Child {
    dev.sync_cmd()
        .args([
            "sync", "join", code, "--server", &srv.url, "--name", name, "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run evi sync join")
}

/// `evi sync pair` of `a` on a terminal, `b` joining as `name`, up to the
/// prompt the terminal shows, word for word (`None`: no `script` here).
fn asked_on_a_terminal(
    srv: &TestServer,
    a: &Device,
    b: &Device,
    name: &str,
) -> Option<(PairOnTerminal, Child, String)> {
    if !crate::common::tool_present("script", "--version", "apt-get install util-linux") {
        return None;
    }
    let pair = PairOnTerminal::start(a);
    let code = pair.code();
    let joining = join_started(b, &code, srv, name);
    pair.wait_for(&format!(
        "add the device \"{name}\" to pat on {}? [y/N] ",
        srv.url
    ));
    Some((pair, joining, code))
}

#[test]
fn on_a_terminal_pair_asks_before_adding_the_device_and_yes_adds_it() {
    let srv = TestServer::start();
    let (a, b) = (laptop_with_a_line(&srv), Device::new());

    let Some((mut pair, joining, _)) = asked_on_a_terminal(&srv, &a, &b, "phone") else {
        return;
    };
    // Nothing is added before the answer.
    assert_eq!(device_names(&a, &srv), ["laptop"]);
    pair.type_line("y");
    let joined: Run = joining.wait_with_output().unwrap().into();
    assert_eq!(joined.code, 0, "join: {}", joined.stderr);
    let j: Value = serde_json::from_str(joined.stdout.trim()).unwrap();
    assert_eq!(
        (&j["outcome"], &j["device"]),
        (&"joined".into(), &"phone".into()),
        "{j}"
    );
    let (status, shown) = pair.end();
    assert_eq!(status, 0, "pair: {shown}");
    assert!(shown.contains("\"outcome\":\"paired\""), "{shown}");
    assert_eq!(device_names(&a, &srv), ["laptop", "phone"]);

    syncs_both_ways(&a, &b);
}

#[test]
fn on_a_terminal_answering_no_refuses_the_joiner_cleanly_and_stores_nothing() {
    let srv = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&srv, "pat", "laptop");

    let Some((mut pair, joining, code)) = asked_on_a_terminal(&srv, &a, &b, "intruder") else {
        return;
    };
    pair.type_line("n");
    let joined: Run = joining.wait_with_output().unwrap().into();
    assert_eq!(joined.code, 1, "join: {joined:?}");
    assert_eq!(joined.stdout, "");
    assert!(
        joined.stderr.contains("its user declined") && joined.stderr.contains("nothing was stored"),
        "{}",
        joined.stderr
    );
    let (status, shown) = pair.end();
    assert_eq!(status, 1, "pair: {shown}");
    assert!(shown.contains("\"outcome\":\"declined\""), "{shown}");
    assert!(
        shown.contains("declined: the pairing is ended and nothing was added"),
        "{shown}"
    );

    // No device, no token, nothing in the new home; the code is spent.
    assert_eq!(device_names(&a, &srv), ["laptop"]);
    let sync = tree(&b.home().join("sync"));
    for kept in ["identity.txt", "token", "state.json"] {
        assert!(!sync.contains_key(kept), "{kept} in {:?}", sync.keys());
    }
    let again = join(&b, &code, &srv, "intruder");
    assert_eq!(again.code, 1, "{again:?}");
}
