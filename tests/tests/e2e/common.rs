// Shared by the SQLite and Postgres targets, which each use a part of it.
#![allow(dead_code)]

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
        // Cargo runs this test with the variables of the package under test
        // (CARGO_PKG_NAME, CARGO_MANIFEST_DIR, …, and OUT_DIR, as this
        // package has a build script). Build scripts that watch them (ring's
        // does) would see them change between this build and a plain `cargo
        // test` from a shell, and rebuild ring, rustls, reqwest and both
        // binaries each way: minutes of every e2e run on 2 cores.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let of_package = ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_EXE_"]
                .iter()
                .any(|p| name.starts_with(p))
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&name.as_ref());
            if of_package {
                build.env_remove(name.as_ref());
            }
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build of the binaries failed");
        dir
    })
}

/// Whether the optional tool `name` answers `name ARG` (`--version` or
/// `version`). Outside CI a missing tool skips the check that needs it, with
/// a line saying so; under CI (`.ci/run` installs every tool, and sets `CI`)
/// it fails the test, so a check CI is meant to run never passes unrun.
pub fn tool_present(name: &str, arg: &str, install: &str) -> bool {
    if Command::new(name).arg(arg).output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{name} is needed in CI ({install}; .ci/run installs it)"
    );
    eprintln!("skipped: {name} is not installed ({install})");
    false
}

/// `age -d -i IDENTITY` of `ciphertext`, as a user opens what the server
/// stores without `evi` (check [`tool_present`] for `age` first).
pub fn age_open(identity: &Path, ciphertext: &[u8]) -> Vec<u8> {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("stored.age");
    std::fs::write(&file, ciphertext).unwrap();
    let out = Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(identity)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "age -d: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `cp -a FROM TO`: a server's data folder as a backup would hold it.
pub fn copy_dir(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success(), "cp -a {} {}", from.display(), to.display());
}

/// A backup of a server, from [`TestServer::back_up`].
pub struct Backup {
    dir: tempfile::TempDir,
}

/// Runs a tool (`pg_dump`, `psql`) that must succeed; its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install postgresql-client)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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

    /// Takes the home's sync lock as another `evi` with `pid` would; held
    /// until the returned file is dropped.
    pub fn hold_sync_lock(&self, pid: u32) -> std::fs::File {
        let path = self.home().join("sync/lock");
        let holder = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        holder.lock().unwrap();
        std::fs::write(&path, pid.to_string()).unwrap();
        holder
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

    /// Fills the home with `evi-gen-home` and `args`; what it printed.
    pub fn generate(&self, args: &[&str]) -> String {
        let run = Command::new(bin("evi-gen-home"))
            .arg(self.home())
            .args(args)
            .output()
            .expect("run evi-gen-home");
        assert!(
            run.status.success(),
            "evi-gen-home: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        String::from_utf8(run.stdout).expect("UTF-8 from evi-gen-home")
    }

    pub fn write_config(&self, text: &str) {
        std::fs::create_dir_all(self.home()).unwrap();
        std::fs::write(self.home().join("config.toml"), text).unwrap();
    }

    /// `evi` with a pinned environment: this home, UTC, 100 columns, and
    /// the device's folder as the current directory (not the test's, which
    /// is a git checkout a handoff would carry).
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin("evi"));
        c.current_dir(self.dir.path());
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
    /// The extra flags it was started with, kept across restarts.
    flags: Vec<String>,
    /// Where its output goes, if anywhere (see [`TestServer::start_logged`]).
    logs: Option<PathBuf>,
    /// With the Postgres target, its database (dropped after the process).
    pub db: Option<crate::pg_db::TestDb>,
    /// With the Postgres target, the bucket its bodies and blobs go to, and
    /// the variables that reach it (kept across restarts).
    pub s3: Option<(crate::s3::S3Server, Vec<(&'static str, String)>)>,
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts with extra flags; waits for the `listening on ADDR` line the
    /// server prints once its socket is bound (no sleeps).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_env(extra, &[])
    }

    /// [`TestServer::start_with`] with extra environment variables (such as
    /// `EVI_SERVER_FAULT`), for this start only: a restart goes without.
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(tempfile::tempdir().expect("temp dir"), extra, env)
    }

    /// [`TestServer::start_env`] on the data folder `data` (a folder with a
    /// filesystem of its own mounted, say).
    pub fn start_in(data: tempfile::TempDir, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(data, extra, env, None)
    }

    /// [`TestServer::start_env`] with everything the server prints kept in
    /// `logs/stderr.log` (its log) and `logs/stdout.log`, across restarts.
    pub fn start_logged(extra: &[&str], env: &[(&str, &str)], logs: &Path) -> Self {
        Self::spawn(
            tempfile::tempdir().expect("temp dir"),
            extra,
            env,
            Some(logs.to_owned()),
        )
    }

    fn spawn(
        data: tempfile::TempDir,
        extra: &[&str],
        env: &[(&str, &str)],
        logs: Option<PathBuf>,
    ) -> Self {
        let db = (crate::backend() == crate::pg_db::Backend::Postgres)
            .then(crate::pg_db::TestDb::create);
        let mut flags: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Some(db) = &db {
            flags.extend(["--database".to_owned(), db.url.clone()]);
            // A pack a compaction replaced goes 1 s after, not 600 (the
            // default, for other replicas' pulls): soon enough for the tests
            // that wait for a forget's bytes to leave, through the same path.
            flags.extend(["--compaction-grace-secs".to_owned(), "1".to_owned()]);
        }
        // The second backend is Postgres and object storage together.
        let s3 = db
            .as_ref()
            .and_then(|_| crate::s3::S3Server::start())
            .map(|s3| {
                let (store, vars) = s3.server_args("server");
                flags.extend(["--store".to_owned(), store]);
                (s3, vars)
            });
        let mut all_env: Vec<(&str, &str)> = s3
            .iter()
            .flat_map(|(_, vars)| vars.iter().map(|(k, v)| (*k, v.as_str())))
            .collect();
        all_env.extend_from_slice(env);
        let args: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (child, url) =
            spawn_server(data.path(), "127.0.0.1:0", &args, &all_env, logs.as_deref());
        Self {
            child,
            data,
            url,
            flags,
            logs,
            db,
            s3,
        }
    }
}

/// Spawns `evi-server` on `listen`, with extra flags and environment
/// variables, and returns it with its URL. With `logs`, its stderr and
/// stdout are appended to files there.
pub fn spawn_server(
    data: &Path,
    listen: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    logs: Option<&Path>,
) -> (std::process::Child, String) {
    use std::io::{BufRead, Write};
    let append = |name: &str| {
        let dir = logs.expect("a log folder");
        std::fs::create_dir_all(dir).unwrap();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .unwrap()
    };
    let stderr = match logs {
        Some(_) => std::process::Stdio::from(append("stderr.log")),
        None => std::process::Stdio::null(),
    };
    let mut child = Command::new(bin("evi-server"))
        .args(["--listen", listen, "--registration", "open", "--data"])
        .arg(data)
        .args(extra)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start evi-server");
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    stdout
        .read_line(&mut line)
        .expect("read the server's first line");
    if logs.is_some() {
        let mut out = append("stdout.log");
        out.write_all(line.as_bytes()).unwrap();
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut out));
    }
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
        self.init_url(&server.url, user, device);
    }

    /// [`Device::init`] against the server at `url` (a proxy in front of
    /// replicas, say).
    pub fn init_url(&self, url: &str, user: &str, device: &str) {
        let r = self.sync(&[
            "sync", "init", "--server", url, "--user", user, "--device", device,
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

/// A server and two devices of one account `pat`: `laptop`, and `desktop`
/// joined with the laptop's key.
pub fn two_devices() -> (TestServer, Device, Device) {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    (server, a, b)
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

    /// Kills it if running, then starts it again on the same data folder,
    /// port and flags (clients keep their configured URL).
    pub fn restart(&mut self) {
        self.restart_env(&[]);
    }

    /// [`TestServer::restart`] with extra environment variables.
    pub fn restart_env(&mut self, env: &[(&str, &str)]) {
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
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let mut all_env: Vec<(&str, &str)> = self
            .s3
            .iter()
            .flat_map(|(_, vars)| vars.iter().map(|(k, v)| (*k, v.as_str())))
            .collect();
        all_env.extend_from_slice(env);
        let (child, url) = spawn_server(
            self.data.path(),
            &addr,
            &flags,
            &all_env,
            self.logs.as_deref(),
        );
        assert_eq!(url, self.url);
        self.child = child;
    }

    /// Backs up everything the server stores as its operator would, with
    /// it stopped: the data folder; on Postgres a `pg_dump` of its
    /// database and a copy of the bucket. Restarts it after.
    pub fn back_up(&mut self) -> Backup {
        self.kill();
        let dir = tempfile::tempdir().unwrap();
        copy_dir(self.data.path(), &dir.path().join("data"));
        if let Some(db) = &self.db {
            let dump = dir.path().join("database.sql");
            run_ok(
                Command::new("pg_dump")
                    .args(["--clean", "--if-exists", "--file"])
                    .arg(&dump)
                    .arg(&db.url),
            );
        }
        if let Some(bucket) = self.bucket_dir() {
            copy_dir(&bucket, &dir.path().join("bucket"));
        }
        self.restart();
        Backup { dir }
    }

    /// Puts `backup` back in place of everything the server stores now
    /// (stopped meanwhile), then restarts it.
    pub fn restore(&mut self, backup: &Backup) {
        self.kill();
        std::fs::remove_dir_all(self.data.path()).unwrap();
        copy_dir(&backup.dir.path().join("data"), self.data.path());
        if let Some(db) = &self.db {
            run_ok(
                Command::new("psql")
                    .args(["--quiet", "-v", "ON_ERROR_STOP=1", "--file"])
                    .arg(backup.dir.path().join("database.sql"))
                    .arg(&db.url),
            );
        }
        if let Some(bucket) = self.bucket_dir() {
            std::fs::remove_dir_all(&bucket).unwrap();
            copy_dir(&backup.dir.path().join("bucket"), &bucket);
        }
        self.restart();
    }

    /// The folders holding what the server stores as files, each with what
    /// it is: its data folder, and the bucket's when it has one.
    pub fn file_roots(&self) -> Vec<(PathBuf, &'static str)> {
        let mut out = vec![(self.data.path().to_owned(), "data folder")];
        out.extend(self.bucket_dir().map(|b| (b, "bucket")));
        out
    }

    /// The folder the S3 test server keeps this server's bucket in.
    fn bucket_dir(&self) -> Option<PathBuf> {
        let (s3, _) = self.s3.as_ref()?;
        Some(s3.root.path().join(crate::s3::BUCKET))
    }

    /// Everything the server stores, as files: its data folder
    /// (`data/…`), on Postgres a dump of its database's rows
    /// (`database.sql`), and the bucket's objects (`bucket/…`).
    pub fn stored(&self) -> Tree {
        let mut out: Tree = tree(self.data.path())
            .into_iter()
            .map(|(k, v)| (format!("data/{k}"), v))
            .collect();
        if let Some(db) = &self.db {
            let dump = run_ok(Command::new("pg_dump").args(["--data-only", "--inserts", &db.url]));
            out.insert("database.sql".to_owned(), Some(dump.into_bytes()));
        }
        if let Some(bucket) = self.bucket_dir() {
            out.extend(
                tree(&bucket)
                    .into_iter()
                    .map(|(k, v)| (format!("bucket/{k}"), v)),
            );
        }
        out
    }

    /// `GET /api/v1/<path>` with a device's token, as JSON.
    pub fn get_json(&self, token: &str, path: &str) -> serde_json::Value {
        get_json_at(&self.url, token, path)
    }

    /// Every record of the account (all pages).
    pub fn records(&self, token: &str) -> Vec<serde_json::Value> {
        records_at(&self.url, token)
    }
}

/// `GET /api/v1/<path>` of the server at `url` with a device's token, as JSON.
pub fn get_json_at(url: &str, token: &str, path: &str) -> serde_json::Value {
    let resp = http()
        .get(format!("{url}/api/v1/{path}"))
        .bearer_auth(token)
        .send()
        .expect("request to the test server");
    assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
    resp.json().expect("JSON body")
}

/// Every record the server at `url` holds for the token's account.
pub fn records_at(url: &str, token: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = get_json_at(url, token, &format!("records?after={after}"));
        out.extend(page["records"].as_array().unwrap().iter().cloned());
        after = page["next_after"].as_u64().unwrap();
        if !page["more"].as_bool().unwrap() {
            return out;
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

/// Everything under `root` (empty when it does not exist). A file removed
/// while the tree is read (a server collecting blobs, say) is left out.
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
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        out.insert(rel, Some(bytes));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => panic!("cannot read {}: {e}", path.display()),
                }
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

// ---------------------------------------------------------------------------
// A reference reader (DESIGN.md "Entry identity"), written again here on
// purpose: tests compare what devices hold without trusting the evi library.

/// DESIGN.md: `hex(SHA-256("evi-entry-v1" 0x00 parent 0x00 line))[..32]`.
pub fn derive_id(parent: Option<&str>, raw: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"evi-entry-v1");
    h.update([0]);
    h.update(parent.unwrap_or("").as_bytes());
    h.update([0]);
    h.update(raw);
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One entry of a session as a device holds it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    pub id: String,
    pub parent: Option<String>,
    pub day: String,
    /// The line less any `id`/`parentId` pull put at its front, or the
    /// original bytes of pull's `eviRawLine` wrapper.
    pub content: Vec<u8>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut c: String = String::from_utf8_lossy(&self.content)
            .chars()
            .take(120)
            .collect();
        if self.content.len() > 120 {
            c.push('…');
        }
        write!(
            f,
            "{} (parent {:?}, {}) {c}",
            self.id, self.parent, self.day
        )
    }
}

/// `(id, parentId)` a line names itself (`parentId: Some(None)` is null), and
/// the bytes a wrapper carries.
pub fn named(raw: &[u8]) -> (Option<String>, Option<Option<String>>, Option<Vec<u8>>) {
    use base64::Engine as _;
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(raw) else {
        return (None, None, None);
    };
    let id = m.get("id").and_then(|v| v.as_str()).map(str::to_owned);
    let parent = m.get("parentId").map(|v| v.as_str().map(str::to_owned));
    let wrapped = id
        .as_ref()
        .and(m.get("eviRawLine"))
        .and_then(|v| v.as_str())
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
    (id, parent, wrapped)
}

/// The line less the `"id":…,"parentId":…` pull may have put at its front.
pub fn strip_added(raw: &[u8], id: &str, parent: Option<&str>) -> Vec<u8> {
    let Some(brace) = raw.iter().position(|&b| b == b'{') else {
        return raw.to_vec();
    };
    let mut rest = &raw[brace + 1..];
    let id = format!("\"id\":{},", serde_json::to_string(id).unwrap());
    if let Some(r) = rest.strip_prefix(id.as_bytes()) {
        rest = r;
    }
    let parent = format!("\"parentId\":{}", serde_json::to_string(&parent).unwrap());
    let Some(mut rest) = rest.strip_prefix(parent.as_bytes()) else {
        return raw.to_vec();
    };
    if let Some(r) = rest.strip_prefix(b",") {
        rest = r;
    }
    [&raw[..=brace], rest].concat()
}

/// The day folders of `<home>/transcripts` holding `session`, in order.
pub fn session_files(dev: &Device, session: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dev.home().join("transcripts")) else {
        return out;
    };
    for e in rd {
        let day = e.unwrap().file_name().to_string_lossy().into_owned();
        let path = dev
            .home()
            .join("transcripts")
            .join(&day)
            .join(format!("{session}.jsonl"));
        if path.is_file() {
            out.push((day, path));
        }
    }
    out.sort();
    out
}

/// Every session id under `<home>/transcripts`.
pub fn sessions(dev: &Device) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for (rel, bytes) in dev.tree("transcripts") {
        if bytes.is_some()
            && let Some(s) = rel
                .rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".jsonl"))
        {
            out.insert(s.to_owned());
        }
    }
    out
}

/// A session's entries in reading order (day folders, then file order); a
/// partial last line is not an entry yet.
pub fn held(dev: &Device, session: &str) -> Vec<Held> {
    let mut out = Vec::new();
    let mut tip: Option<String> = None;
    for (day, path) in session_files(dev, session) {
        let bytes = std::fs::read(&path).unwrap();
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => &bytes[..=end],
            None => &[][..],
        };
        for raw in complete.split(|&b| b == b'\n') {
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let (own_id, own_parent, wrapped) = named(raw);
            let parent = match &own_parent {
                Some(p) => p.clone(),
                None => tip.clone(),
            };
            let id = own_id.unwrap_or_else(|| derive_id(parent.as_deref(), raw));
            if own_parent.is_none() {
                tip = Some(id.clone());
            }
            let content = match wrapped {
                Some(original) => original,
                None => strip_added(raw, &id, parent.as_deref()),
            };
            out.push(Held {
                id,
                parent,
                day: day.clone(),
                content,
            });
        }
    }
    out
}

/// A session's entries as a set (what convergence compares).
pub fn held_set(dev: &Device, session: &str) -> std::collections::BTreeSet<Held> {
    held(dev, session).into_iter().collect()
}

/// Every complete line of every transcript file parses as JSON.
pub fn assert_all_lines_json(dev: &Device, what: &str) {
    for (rel, bytes) in dev.tree("transcripts") {
        let Some(bytes) = bytes else { continue };
        for (n, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            if raw.is_empty() {
                continue;
            }
            assert!(
                serde_json::from_slice::<serde_json::Value>(raw).is_ok(),
                "{what}: {rel} line {} is not JSON: {}",
                n + 1,
                String::from_utf8_lossy(raw)
            );
        }
    }
}

/// Both devices hold the same sessions, each with the same entries.
pub fn assert_converged(a: &Device, b: &Device, what: &str) {
    let sa = sessions(a);
    assert_eq!(sa, sessions(b), "{what}: the devices hold other sessions");
    for s in &sa {
        let (ea, eb) = (held_set(a, s), held_set(b, s));
        let only_a: Vec<_> = ea.difference(&eb).collect();
        let only_b: Vec<_> = eb.difference(&ea).collect();
        assert!(
            only_a.is_empty() && only_b.is_empty(),
            "{what}: session {s} differs\n  only on the first: {}\n  only on the second: {}",
            show(&only_a),
            show(&only_b)
        );
    }
}

fn show(entries: &[&Held]) -> String {
    let more = entries.len().saturating_sub(10);
    let mut out: String = entries
        .iter()
        .take(10)
        .map(|e| format!("\n    {e:?}"))
        .collect();
    if more > 0 {
        out += &format!("\n    … and {more} more");
    }
    out
}

// ---------------------------------------------------------------------------
// `evi web`: the real viewer on a loopback port.

/// A running `evi web` on a device's home, killed when dropped.
pub struct WebViewer {
    pub child: std::process::Child,
    /// The URL it printed (with `?token=` when it needs one).
    pub url: String,
    /// `http://ADDR` without path or token, for building request URLs.
    pub base: String,
    pub stderr: std::path::PathBuf,
}

impl Device {
    /// `evi web --listen ADDR`; waits for the `listening on URL` line it
    /// prints once its socket is bound (no sleeps).
    pub fn web(&self, listen: &str) -> WebViewer {
        use std::io::BufRead;
        let stderr = self
            .dir
            .path()
            .join(format!("web-{}.stderr", std::process::id()));
        let mut child = self
            .sync_cmd()
            .args(["web", "--listen", listen])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start evi web");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the viewer's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                let err = std::fs::read_to_string(&stderr).unwrap_or_default();
                panic!("unexpected first line from evi web: {line:?}; stderr: {err}")
            })
            .to_owned();
        let base = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .map(|host| format!("http://{host}"))
            .expect("an http URL");
        WebViewer {
            child,
            url,
            base,
            stderr,
        }
    }
}

impl WebViewer {
    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for WebViewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Homes with some weight: generated transcripts, checkpoint blobs.

impl Device {
    /// Adds `count` checkpoint blobs of random bytes (sizes up to
    /// `max_size`, from `seed`) and a journal line naming each; the bytes
    /// written.
    pub fn add_checkpoints(&self, day: &str, count: u64, max_size: u64, seed: u64) -> u64 {
        let mut rng = Rng::new(seed);
        let mut journal = String::new();
        let mut total = 0;
        for seq in 1..=count {
            let blob = random_bytes(rng.range(1, max_size + 1) as usize, rng.next());
            let sha = sha256_hex(&blob);
            self.put(&format!("checkpoints/blobs/{sha}"), &blob);
            journal += &journal_line(day, seq, &format!("/src/f{seq}.rs"), &sha, blob.len());
            total += blob.len() as u64;
        }
        self.append("checkpoints/journal.jsonl", journal.as_bytes());
        total
    }

    /// The keys this device's identity derives (what the server's ids are
    /// keyed with).
    pub fn keys(&self) -> evi::sync::SyncKeys {
        let identity = evi::sync::Identity::load(&self.identity_path()).unwrap();
        evi::sync::SyncKeys::derive(&identity)
    }

    /// The keyed id the server stores each transcript entry here under.
    pub fn keyed_entries(&self) -> std::collections::BTreeSet<String> {
        let keys = self.keys();
        let mut out = std::collections::BTreeSet::new();
        for s in sessions(self) {
            let session: evi_shared::SessionId = s.parse().unwrap();
            for e in held(self, &s) {
                out.insert(keys.entry_key(&session, &e.id).to_string());
            }
        }
        out
    }
}

/// A checkpoint journal line naming `blob` (the prior contents of `path`).
pub fn journal_line(day: &str, seq: u64, path: &str, blob: &str, size: usize) -> String {
    format!(
        "{{\"seq\":{seq},\"ts\":\"{day}T10:00:{:02}Z\",\"path\":\"{path}\",\"op\":\"write\",\"blob\":\"{blob}\",\"size\":{size}}}\n",
        seq % 60
    )
}

/// Bytes that neither compress nor repeat.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// SHA-256 in lowercase hex.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Every entry id of every record the server holds for `token`'s account,
/// as often as records hold it.
pub fn stored_entry_ids(server: &TestServer, token: &str) -> Vec<String> {
    stored_entry_ids_at(&server.url, token)
}

/// [`stored_entry_ids`] of the server at `url`.
pub fn stored_entry_ids_at(url: &str, token: &str) -> Vec<String> {
    records_at(url, token)
        .iter()
        .flat_map(|r| r["entry_ids"].as_array().unwrap().clone())
        .map(|id| id.as_str().unwrap().to_owned())
        .collect()
}

/// Each id of `ids` once, or the ids that are there more often.
pub fn assert_each_once(ids: &[String], what: &str) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    let twice: Vec<&String> = ids
        .iter()
        .filter(|id| !seen.insert((*id).clone()))
        .collect();
    assert!(
        twice.is_empty(),
        "{what}: {} ids stored more than once, first {:?}",
        twice.len(),
        twice.first()
    );
    seen
}

// ---------------------------------------------------------------------------
// A small disk of its own: a tmpfs.

/// A tmpfs mounted on a folder, unmounted (and the folder removed) when
/// dropped: a disk that really fills up.
pub struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` bytes on `at` (created). Where mounting is
    /// refused (not root, no CAP_SYS_ADMIN) the test is skipped with a line
    /// saying so (`None`), but fails in CI (`CI=true`), which runs as root.
    pub fn mount(test: &str, at: &Path, size: u64) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let run = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output();
        let why = match run {
            Ok(o) if o.status.success() => {
                return Some(Self { at: at.to_owned() });
            }
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            Err(e) => e.to_string(),
        };
        let msg = format!("{test}: cannot mount a tmpfs ({why}); it needs root or CAP_SYS_ADMIN");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("skipping {msg}");
        None
    }

    /// Fills the disk with a ballast file until all but about `room` bytes
    /// are taken; remove the file to make room again.
    pub fn fill_leaving(&self, room: u64) -> PathBuf {
        use std::io::Write;
        let path = self.at.join("ballast");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 << 10];
        let mut len = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => len += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", self.at.display()),
            }
        }
        f.set_len(len.saturating_sub(room)).unwrap();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        let _ = std::fs::remove_dir_all(&self.at);
    }
}

/// A blocking HTTP client for the tests' own requests. reqwest is built
/// without a TLS provider of its own (the client's Cargo.toml says why), so
/// every client needs ring installed first, as `evi` does.
pub fn http() -> reqwest::blocking::Client {
    evi::sync::remote::client::http_builder().build().unwrap()
}

/// `reqwest::blocking::get` through [`http`].
pub fn get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::blocking::Response> {
    http().get(url).send()
}

/// An async HTTP client, as [`http`].
pub fn http_async() -> reqwest::Client {
    evi_server::storage::install_tls_provider();
    reqwest::Client::new()
}

/// The device names of a device list (`GET /devices`, or `evi sync devices
/// --json`), sorted.
pub fn sorted_device_names(list: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}
