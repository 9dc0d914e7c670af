//! Issue 21, the first hour's smaller rows, as a user meets them: the
//! watcher's service runs an installed `evi`, never the build folder's;
//! revoking the device one is on asks first; config mistakes name their key
//! (or say what is wrong where no key applies); a push through a bad network
//! says once that it retries; a key passphrase has a minimum, and the key
//! commands keep stdout for data. Each test checks what the user reads
//! (stdout, stderr) and the exit code.

use std::path::PathBuf;
use std::process::Stdio;

use crate::common::{Device, PASSPHRASE, Run, TestServer, bin, today};
use crate::sync_proxy::{Fault, Proxy};

/// A copy of the test's `evi` installed outside any build folder, and the
/// PATH that finds it first.
pub struct Installed {
    pub path: String,
    pub evi: PathBuf,
}

/// Installs `evi` into `dev`'s folder (`bin/evi`), as `cargo install`
/// would into `~/.cargo/bin`.
pub fn install_evi(dev: &Device) -> Installed {
    let dir = dev.dir.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let evi = dir.join("evi");
    std::fs::copy(bin("evi"), &evi).unwrap();
    Installed {
        path: format!("{}:/usr/bin:/bin", dir.display()),
        evi,
    }
}

#[test]
fn watch_install_refuses_the_build_folder_binary_when_none_is_installed() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    // The build folder on PATH (as `export PATH=$PWD/target/release:$PATH`
    // does) is no installed evi either.
    let build = bin("evi").parent().unwrap().to_owned();
    let run: Run = a
        .sync_cmd()
        .env("PATH", format!("{}:/usr/bin:/bin", build.display()))
        .args(["sync", "watch", "--install", "--no-enable"])
        .output()
        .unwrap()
        .into();
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: this evi is in a build folder ({}), which `cargo clean` deletes and the \
                 next build replaces: a service running it would break\n\
                 hint: install evi first: `cargo install --path cli` (into ~/.cargo/bin, which \
                 must be on PATH), then run `evi sync watch --install` again\n",
                bin("evi").display()
            )
            .as_str()
        )
    );
    assert!(
        !a.dir.path().join(".config/systemd").exists(),
        "no unit is written"
    );
}

/// Runs `cmd` (a shell command line) on a pseudo-terminal, as typed by a
/// person who answers `input`; what the terminal showed.
pub(crate) fn on_terminal(dev: &Device, cmd: &str, input: &str) -> Run {
    use std::io::{Read as _, Write as _};
    let base = dev.sync_cmd();
    // `script` (util-linux) gives the command a terminal of its own.
    let mut script = std::process::Command::new("script");
    script
        .env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("SHELL", "/bin/sh")
        .args([
            "-qec",
            &format!("{} {cmd}", bin("evi").display()),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = script.spawn().expect("`script` from util-linux");
    // The answer is typed once the question is on the screen, as a person
    // types it: typed earlier, the terminal echoes it before the question
    // and the screen reads "n" then "[y/N]".
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if all.windows(5).any(|w| w == b"[y/N]") {
                let _ = tx.send(());
            }
        }
        all
    });
    // At most 60 s: a command that never asks shows in its output.
    let _ = rx.recv_timeout(std::time::Duration::from_secs(60));
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let mut err = Vec::new();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let status = child.wait().unwrap();
    let stdout = reader.join().unwrap();
    std::process::Output {
        status,
        stdout,
        stderr: err,
    }
    .into()
}

#[test]
fn revoking_this_device_asks_first_and_needs_yes_without_a_terminal() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let id = |dev: &Device| -> String {
        let v: serde_json::Value =
            serde_json::from_str(&dev.sync_ok(&["devices", "--json"])).unwrap();
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["current"] == true)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let laptop = id(&a);

    // No terminal (a script, this test): refused, nothing revoked.
    let run: Run = a
        .sync_cmd()
        .args(["sync", "revoke", "laptop"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .into();
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            2,
            "",
            format!(
                "error: laptop ({laptop}) is this device: revoking it stops its sync until you \
                 run `evi sync login` here again\n\
                 hint: run it on a terminal to be asked, or pass --yes to revoke it anyway\n"
            )
            .as_str()
        )
    );
    a.sync_ok(&["push"]);

    // On a terminal: asked; anything but yes revokes nothing.
    let run = on_terminal(&a, "sync revoke laptop", "n\n");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(&format!(
            "laptop ({laptop}) is this device: revoking it stops its sync until you run `evi \
             sync login` here again. Revoke it? [y/N] "
        )) && run.stdout.contains("nothing revoked"),
        "{run:?}"
    );
    a.sync_ok(&["push"]);

    // Another device is revoked without a question.
    let desktop = id(&b);
    let run = a.sync(&["sync", "revoke", "desktop"]);
    assert_eq!(
        (run.code, run.stdout),
        (0, format!("revoked desktop ({desktop})\n"))
    );

    // `--yes`: revoked, and said so.
    let run = a.sync(&["sync", "revoke", "laptop", "--yes"]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            0,
            format!("revoked laptop ({laptop}); this device can no longer sync\n").as_str(),
            ""
        )
    );
    assert_eq!(a.sync(&["sync", "push"]).code, 1, "the token is dead");
}

/// `evi sessions list` in a home whose config.toml is `text`.
fn with_config(text: &str) -> (Device, Run) {
    let dev = Device::new();
    dev.write_config(text);
    let run = dev.evi(&["sessions", "list"]);
    (dev, run)
}

#[test]
fn config_mistakes_name_the_key_or_say_what_is_wrong() {
    let (dev, run) = with_config("[tools]\ntranscripts = true\n\n[web]\nurl = http://pc:7878\n");
    let file = dev.home().join("config.toml");
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: {}:5: key `web.url`: string values must be quoted, expected literal \
                 string (write url = \"http://pc:7878\")\n\
                 hint: fix or remove line 5, then run again\n",
                file.display()
            )
            .as_str()
        ),
        "an unquoted value"
    );

    let (dev, run) = with_config("[web\nurl = \"http://pc:7878\"\n");
    let file = dev.home().join("config.toml");
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: {}:1: table header `[web`: unclosed table, expected `]` (a table is \
                 written `[name]`)\n\
                 hint: fix or remove line 1, then run again\n",
                file.display()
            )
            .as_str()
        ),
        "an unclosed table"
    );

    // EVI_HOME naming a file (the config file itself, say).
    let dev = Device::new();
    dev.write_config("[tools]\ntranscripts = true\n");
    let file = dev.home().join("config.toml");
    for args in [&["sessions", "list"][..], &["sync", "status"]] {
        let run: Run = dev
            .cmd()
            .env("EVI_HOME", &file)
            .args(args)
            .output()
            .unwrap()
            .into();
        assert_eq!(
            (run.code, run.stdout.as_str(), run.stderr.as_str()),
            (
                1,
                "",
                format!(
                    "error: EVI_HOME points to {}, which is not a folder\n\
                     hint: point EVI_HOME at the eVi home folder (the one holding config.toml \
                     and transcripts/), or unset it to use ~/.evi\n",
                    file.display()
                )
                .as_str()
            ),
            "{args:?}"
        );
    }
}

#[test]
fn a_push_through_a_bad_network_says_once_that_it_retries() {
    let server = TestServer::start();
    let proxy = Proxy::start(&server.url);
    let (first, a) = (Device::new(), Device::new());
    first.init(&server, "pat", "first");
    a.join_copying_key(&first, &proxy.url, "pat", "a");
    let day = today();
    for n in 0..12 {
        a.write(
            &day,
            &format!("s{n}"),
            format!("{{\"role\":\"user\",\"content\":\"hello {n}\"}}\n").as_bytes(),
        );
    }
    a.add_checkpoints(&day, 12, 20_000, 5);
    // A fixed seed: the same requests meet the same resets every run. A
    // reset before the server sees the request is the plainest retry; ten
    // attempts a call keep a call that meets five in a row from failing
    // the push (the uploads run in parallel, so their order can vary).
    proxy.inject(21, 35, &[Fault::ResetBefore]);
    let run: Run = a
        .sync_cmd()
        .env("EVI_SYNC_RETRIES", "10")
        .args(["sync", "push", "--json"])
        .output()
        .unwrap()
        .into();
    println!("{}", proxy.counts());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let retries = report["retries"].as_u64().unwrap();
    assert!(retries >= 3, "too few faults to tell: {report}");
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.ends_with("; retrying…"))
        .collect();
    assert_eq!(
        said.len(),
        1,
        "{retries} retries said {} times:\n{}",
        said.len(),
        run.stderr
    );
    assert!(said[0].contains(&proxy.url), "{}", said[0]);
}

#[test]
fn key_export_wants_a_passphrase_of_8_characters_and_key_messages_go_to_stderr() {
    let server = TestServer::start();
    let (a, b) = (Device::new(), Device::new());
    a.init(&server, "pat", "laptop");
    let key = a.dir.path().join("key.age");
    for (pass, n, s) in [("x", 1, ""), ("seven77", 7, "s")] {
        let run: Run = a
            .sync_cmd()
            .env("EVI_KEY_PASSPHRASE", pass)
            .args(["sync", "key", "export", "-o"])
            .arg(&key)
            .output()
            .unwrap()
            .into();
        assert_eq!(
            (run.code, run.stdout.as_str(), run.stderr.as_str()),
            (
                2,
                "",
                format!(
                    "error: the key passphrase is too short ({n} character{s}; at least 8): \
                     whoever gets the exported file can guess at it offline (EVI_KEY_PASSPHRASE)\n\
                     hint: set EVI_KEY_PASSPHRASE to a longer passphrase, e.g. a few random words\n"
                )
                .as_str()
            )
        );
        assert!(!key.exists());
    }
    let run = a.sync(&["sync", "key", "export", "-o", key.to_str().unwrap()]);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
    assert!(run.stderr.starts_with("key "), "{}", run.stderr);
    assert!(PASSPHRASE.chars().count() >= 8);

    let run = b.sync(&["sync", "key", "import", key.to_str().unwrap()]);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.stderr);
    assert!(
        run.stderr.ends_with("imported; now run `evi sync login`\n"),
        "{}",
        run.stderr
    );
}

/// The browser and schemathesis tests are ignored (with their reason in
/// `cargo test`'s output) exactly when their tool is missing outside CI;
/// a pass means they ran. Fails when `tests/build.rs` and this machine
/// disagree.
#[test]
fn tests_needing_a_missing_tool_are_reported_ignored_not_passed() {
    let ci = std::env::var_os("CI").is_some();
    let browser = ["/usr/bin/chromium", "/usr/bin/chromedriver"]
        .iter()
        .all(|p| std::path::Path::new(p).exists());
    let schemathesis =
        std::env::var_os("EVI_SCHEMATHESIS").is_some_and(|p| std::path::Path::new(&p).is_file());
    assert_eq!(
        cfg!(evi_no_browser),
        !ci && !browser,
        "the browser tests' ignore mark (tests/build.rs)"
    );
    assert_eq!(
        cfg!(evi_no_schemathesis),
        !ci && !schemathesis,
        "the schemathesis test's ignore mark (tests/build.rs)"
    );
}

#[test]
fn forgetting_sessions_and_checkpoints_asks_first_and_needs_yes_without_a_terminal() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let line = b"{\"role\":\"user\",\"content\":\"hi\",\"ts\":\"2026-06-08T10:00:00Z\"}\n";
    let s1 = a.write("2026-06-08", "S1", line);
    let s2 = a.write("2026-06-08", "S2", line);
    a.sync_ok(&["push"]);
    let no_terminal = |args: &[&str]| -> Run {
        a.cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .into()
    };

    // No terminal (a script, this test): refused, nothing forgotten.
    let run = no_terminal(&["sessions", "forget", "S1"]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            2,
            "",
            "error: this forgets session S1 on this device, on the server and on every device \
             that syncs (this device's trash keeps it 7 days: `evi sessions forget --undo ID`)\n\
             hint: run it on a terminal to be asked, or pass --yes to forget anyway\n"
        )
    );
    assert!(s1.exists());
    // On a terminal: asked; anything but yes forgets nothing.
    let run = on_terminal(&a, "sessions forget S1", "n\n");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(
            "this forgets session S1 on this device, on the server and on every device that \
             syncs (this device's trash keeps it 7 days: `evi sessions forget --undo ID`). \
             Forget? [y/N] "
        ) && run.stdout.contains("nothing forgotten"),
        "{run:?}"
    );
    assert!(s1.exists());
    let run = on_terminal(&a, "sessions forget S1", "y\n");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("forgot S1 ("), "{run:?}");
    assert!(!s1.exists());
    // --yes for scripts; a dry run and an undo take nothing away: not asked.
    let run = no_terminal(&["sessions", "forget", "S2", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(s2.exists());
    let run = no_terminal(&["sessions", "forget", "--yes", "S2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!s2.exists());
    let run = no_terminal(&["sessions", "forget", "--undo", "S2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(s2.exists());

    // The same rule for checkpoints.
    let journal =
        "{\"seq\":1,\"ts\":\"2026-06-08T10:00:01Z\",\"path\":\"/tmp/x.py\",\"op\":\"create\"}\n";
    a.put("checkpoints/journal.jsonl", journal.as_bytes());
    let run = no_terminal(&["checkpoints", "forget", "1"]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            2,
            "",
            "error: this forgets checkpoints 1 of this device's journal here, on the server and \
             on every device that syncs, with the file contents they saved: `evi rewind` can no \
             longer undo those writes\n\
             hint: run it on a terminal to be asked, or pass --yes to forget anyway\n"
        )
    );
    let read = || std::fs::read_to_string(a.home().join("checkpoints/journal.jsonl")).unwrap();
    assert_eq!(read(), journal);
    let run = no_terminal(&["checkpoints", "forget", "--yes", "1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(read(), "");
}
