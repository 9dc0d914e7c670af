//! Fixtures: a throwaway eVi home per device, and the real binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `target/<profile>/`, where cargo puts the binaries, or `EVI_TEST_BIN_DIR`
/// when set: the same tests then drive other builds (an older commit's
/// binaries, to show that a new test fails before its fix).
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("EVI_TEST_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let exe = std::env::current_exe().expect("test executable path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable lives in target/<profile>/deps")
            .to_owned();
        // Make sure both binaries exist and are fresh. `cargo test
        // --workspace` builds them (each package has integration tests), and
        // asking again with the very same selection, so the very same feature
        // resolution, is a no-op then; after `cargo test -p evi-tests` alone
        // it builds what is missing instead of running stale binaries.
        let release = dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["test", "--workspace", "--no-run", "--quiet"]);
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

// ---------------------------------------------------------------------------
// Sync tests: crashes, the server's view, and what devices hold.

impl TestServer {
    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        self.url.strip_prefix("http://").expect("http URL")
    }

    /// SIGKILL, as a crash or a power cut would stop it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills it if running, then starts it again on the same data folder
    /// and port (clients keep their configured URL).
    pub fn restart(&mut self) {
        self.kill();
        let addr = self.addr().to_owned();
        // The port of a killed listener can take a moment to be free again.
        for attempt in 0.. {
            match std::net::TcpListener::bind(&addr) {
                Ok(_probe) => break,
                Err(_) if attempt < 100 => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => panic!("port {addr} stays busy: {e}"),
            }
        }
        let (child, url) = spawn_server(self.data.path(), &addr, &[]);
        assert_eq!(url, self.url);
        self.child = child;
    }

    /// `GET /api/v1/<path>` with a device's token, as JSON.
    pub fn get_json(&self, token: &str, path: &str) -> serde_json::Value {
        let resp = reqwest::blocking::Client::new()
            .get(format!("{}/api/v1/{path}", self.url))
            .bearer_auth(token)
            .send()
            .expect("request to the test server");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().expect("JSON body")
    }

    /// Every record of the account (all pages).
    pub fn records(&self, token: &str) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self.get_json(token, &format!("records?after={after}"));
            out.extend(page["records"].as_array().unwrap().iter().cloned());
            after = page["next_after"].as_u64().unwrap();
            if !page["more"].as_bool().unwrap() {
                return out;
            }
        }
    }
}

impl Device {
    /// `evi sync <args>`, which must succeed; its stdout.
    pub fn sync_ok(&self, args: &[&str]) -> String {
        let run = self.sync_cmd().arg("sync").args(args).output().unwrap();
        let run = Run::from(run);
        assert_eq!(run.code, 0, "evi sync {args:?}: {}", run.stderr);
        run.stdout
    }

    /// Another device of `first`'s account, its identity file copied over
    /// directly (what `key import` ends with, without the passphrase round
    /// trip that takes seconds in a debug build).
    pub fn join_copying_key(&self, first: &Device, url: &str, user: &str, device: &str) {
        use std::os::unix::fs::PermissionsExt;
        let dest = self.identity_path();
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(first.identity_path(), &dest).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o600)).unwrap();
        self.sync_ok(&["login", "--server", url, "--user", user, "--device", device]);
    }

    pub fn identity_path(&self) -> PathBuf {
        self.home().join("sync").join("identity.txt")
    }

    /// This device's bearer token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.home().join("sync").join("token"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// `sync/state.json` as JSON.
    pub fn state(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.home().join("sync").join("state.json")).unwrap())
            .unwrap()
    }

    /// Every file (with its bytes) and folder under `<home>/<sub>`.
    pub fn tree(&self, sub: &str) -> Tree {
        tree(&self.home().join(sub))
    }

    /// Writes `bytes` at `<home>/<rel>`, creating folders.
    pub fn put(&self, rel: &str, bytes: &[u8]) {
        let path = self.home().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Appends `bytes` to `<home>/<rel>`.
    pub fn append(&self, rel: &str, bytes: &[u8]) {
        use std::io::Write;
        let path = self.home().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }
}

/// Relative path → file bytes (`None` for a folder).
pub type Tree = std::collections::BTreeMap<String, Option<Vec<u8>>>;

/// Everything under `root` (empty when it does not exist).
pub fn tree(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let path = e.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                out.insert(rel, None);
                walk(root, &path, out);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

/// Every file of `before` is still there, its old bytes a prefix of its new.
pub fn assert_only_appended(before: &Tree, after: &Tree, what: &str) {
    for (rel, old) in before {
        let new = after
            .get(rel)
            .unwrap_or_else(|| panic!("{what}: {rel} disappeared"));
        if let (Some(old), Some(new)) = (old, new) {
            assert!(
                new.starts_with(old),
                "{what}: {rel} was rewritten, not appended to"
            );
        }
    }
}

/// A small seeded generator (xorshift64*): reproducible "random" tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}
