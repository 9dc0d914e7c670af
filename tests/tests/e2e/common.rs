//! Fixtures: a throwaway eVi home per device, and the real binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `target/<profile>/`, where cargo puts the binaries.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable lives in target/<profile>/deps")
            .to_owned();
        // `cargo test` builds the binaries only of packages with integration
        // tests of their own; build both once so this binary never runs stale
        // ones. A no-op when they are fresh.
        let release = dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "evi",
            "-p",
            "evi-server",
            "--bins",
        ]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build of the binaries failed");
        dir
    })
}

/// Path of a workspace binary (`evi`, `evi-server`).
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A command's result as a user sees it.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            code: o.status.code().unwrap_or(-1),
        }
    }
}

/// One device: an eVi home in a temp folder.
pub struct Device {
    pub dir: tempfile::TempDir,
}

impl Device {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("evi")
    }

    /// Writes a transcript file's exact bytes.
    pub fn write(&self, day: &str, session: &str, bytes: &[u8]) -> PathBuf {
        let dir = self.home().join("transcripts").join(day);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{session}.jsonl"));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    pub fn write_config(&self, text: &str) {
        std::fs::create_dir_all(self.home()).unwrap();
        std::fs::write(self.home().join("config.toml"), text).unwrap();
    }

    /// `evi` with a pinned environment: this home, UTC, 100 columns.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin("evi"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("EVI_HOME", self.home())
            .env("TZ", "UTC")
            .env("COLUMNS", "100")
            .env("NO_COLOR", "1");
        c
    }

    pub fn evi(&self, args: &[&str]) -> Run {
        self.cmd().args(args).output().expect("run evi").into()
    }
}

/// Today's date as a day folder name (UTC, as the tests pin TZ).
pub fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

/// The account password every test device uses.
pub const PASSWORD: &str = "correct horse battery";
/// The passphrase of exported keys in tests.
pub const PASSPHRASE: &str = "test passphrase";

/// A real `evi-server` on a loopback port with its own data folder, killed
/// when dropped.
pub struct TestServer {
    pub child: std::process::Child,
    pub data: tempfile::TempDir,
    pub url: String,
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts with extra flags; waits for the `listening on ADDR` line the
    /// server prints once its socket is bound (no sleeps).
    pub fn start_with(extra: &[&str]) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let (child, url) = spawn_server(data.path(), "127.0.0.1:0", extra);
        Self { child, data, url }
    }
}

/// Spawns `evi-server` on `listen` and returns it with its URL.
pub fn spawn_server(data: &Path, listen: &str, extra: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(bin("evi-server"))
        .args(["--listen", listen, "--registration", "open", "--data"])
        .arg(data)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start evi-server");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the server's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from evi-server: {line:?}"));
    (child, format!("http://{addr}"))
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Device {
    /// `evi` with the test password and key passphrase in the environment.
    pub fn sync_cmd(&self) -> Command {
        let mut c = self.cmd();
        c.env("EVI_SYNC_PASSWORD", PASSWORD)
            .env("EVI_KEY_PASSPHRASE", PASSPHRASE);
        c
    }

    pub fn sync(&self, args: &[&str]) -> Run {
        self.sync_cmd().args(args).output().expect("run evi").into()
    }

    /// First device of `user`: key and account.
    pub fn init(&self, server: &TestServer, user: &str, device: &str) {
        let r = self.sync(&[
            "sync",
            "init",
            "--server",
            &server.url,
            "--user",
            user,
            "--device",
            device,
        ]);
        assert_eq!(r.code, 0, "sync init: {}", r.stderr);
    }

    /// Another device of `first`'s account: import its key, log in.
    pub fn join(&self, first: &Device, server: &TestServer, user: &str, device: &str) {
        let key = self.dir.path().join("key.age");
        let r = first.sync(&["sync", "key", "export", "-o", key.to_str().unwrap()]);
        assert_eq!(r.code, 0, "key export: {}", r.stderr);
        let r = self.sync(&["sync", "key", "import", key.to_str().unwrap()]);
        assert_eq!(r.code, 0, "key import: {}", r.stderr);
        let r = self.sync(&[
            "sync",
            "login",
            "--server",
            &server.url,
            "--user",
            user,
            "--device",
            device,
        ]);
        assert_eq!(r.code, 0, "sync login: {}", r.stderr);
    }
}
