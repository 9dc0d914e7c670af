// Both runs (SQLite, and Postgres in again_on_postgres) use parts of it.
#![allow(dead_code)]

//! The `TestServer` fixture and a small JSON client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use evi_shared::KeyedId;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub const PASSWORD: &str = "correct horse battery";

pub use crate::on_postgres::Backend;

pub struct TestServer {
    child: Child,
    pub addr: String,
    pub root: tempfile::TempDir,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// With [`Backend::Postgres`], the database of its own (dropped last).
    pub db: Option<TestDb>,
    /// With [`Backend::Postgres`], the bucket its bodies and blobs go to
    /// (a real S3-compatible server, see [`crate::s3`]).
    pub s3: Option<crate::s3::S3Server>,
}

/// The Postgres server the tests on Postgres use (`again_on_postgres`
/// checks it is set, or says the run on Postgres is skipped).
pub fn postgres_url() -> String {
    std::env::var("EVI_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "EVI_TEST_POSTGRES_URL is unset: set it to a Postgres where the tests may create \
                 databases (e.g. postgres://postgres@127.0.0.1:5432/test)"
            )
        })
}

/// Runs `sql` on the database `url` names (a thread of its own, so it
/// works from sync and async tests alike).
pub fn pg_exec(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("cannot connect to the test Postgres: {e}"));
            tokio::spawn(conn);
            let mut rows = Vec::new();
            for m in client.simple_query(&sql).await.unwrap() {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect());
                }
            }
            rows
        })
    })
    .join()
    .unwrap()
}

/// A database of its own on the test Postgres, empty when taken, from
/// the pool of [`crate::pg_pool`] (given back with the value).
pub struct TestDb {
    pub url: String,
    slot: crate::pg_pool::PooledDb,
}

impl TestDb {
    pub fn name(&self) -> &str {
        &self.slot.name
    }

    pub fn create() -> Self {
        let slot = crate::pg_pool::PooledDb::take(&postgres_url());
        Self {
            url: slot.url.clone(),
            slot,
        }
    }
}

/// Another `evi-server` on a server's database and data folder (bodies and
/// blobs shared), as a second replica behind a proxy would be.
pub struct Replica {
    child: Child,
    pub addr: String,
}

impl Replica {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// A client of `api`'s account, pointed at this replica.
    pub fn rebase(&self, api: &Api) -> Api {
        Api {
            base: self.url(""),
            ..api.clone()
        }
    }

    pub fn anon(&self) -> Api {
        Api {
            http: http(),
            base: self.url(""),
            token: None,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestServer {
    /// Starts with open registration plus `args`.
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    pub fn start_env(args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), args, envs)
    }

    /// Starts on `root`, whose `data` folder may already hold a data folder.
    pub fn start_in(root: tempfile::TempDir, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut all = Vec::new();
        if !args.contains(&"--registration") {
            all.extend(["--registration".to_owned(), "open".to_owned()]);
        }
        all.extend(args.iter().map(|s| s.to_string()));
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut envs = envs;
        let db = (crate::backend() == Backend::Postgres).then(TestDb::create);
        if let Some(db) = &db {
            all.extend(["--database".to_owned(), db.url.clone()]);
            // A pack a compaction replaced goes 1 s after, not 600 (the
            // default, for other replicas' pulls); a test's own value, set
            // after, wins.
            envs.insert(
                0,
                (
                    "EVI_SERVER_COMPACTION_GRACE_SECS".to_owned(),
                    "1".to_owned(),
                ),
            );
        }
        // The second backend is Postgres and object storage together; a
        // test that names its own store keeps it.
        let s3 = (db.is_some() && !args.contains(&"--store"))
            .then(crate::s3::S3Server::start)
            .flatten();
        if let Some(s3) = &s3 {
            all.extend([
                "--store".to_owned(),
                format!("s3://{}/server", crate::s3::BUCKET),
            ]);
            envs.extend(s3.envs().into_iter().map(|(k, v)| (k.to_owned(), v)));
        }
        let (child, addr) = spawn(root.path(), &all, &envs);
        Self {
            child,
            addr,
            root,
            args: all,
            envs,
            db,
            s3,
        }
    }

    /// `evi-server invite` for this server: its data folder, and its
    /// database when it has one.
    pub fn invite_cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_evi-server"));
        c.arg("invite").arg("--data").arg(self.data());
        if let Some(db) = &self.db {
            c.args(["--database", &db.url]);
        }
        c
    }

    /// `evi-server admin ARGS` against this server's data folder, database
    /// and store (with the bucket's variables), as its operator runs it.
    pub fn admin(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_evi-server"));
        c.arg("admin").args(args).arg("--data").arg(self.data());
        let mut flags = self.args.iter();
        while let Some(a) = flags.next() {
            if a == "--database" || a == "--store" {
                c.arg(a).args(flags.next());
            }
        }
        c.envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run evi-server admin")
    }

    /// `evi-server admin ARGS --json`, asserted to succeed: its stdout.
    pub fn admin_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.admin(&all);
        assert!(
            out.status.success(),
            "admin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A second server on this one's database and data folder.
    pub fn replica(&self) -> Replica {
        assert!(self.db.is_some(), "replicas share a Postgres database");
        let (child, addr) = spawn(self.root.path(), &self.args, &self.envs);
        Replica { child, addr }
    }

    /// A second server on this one's database and data folder, with
    /// `--metrics-listen` on a free port (the second value) and `envs` on
    /// top of this one's environment.
    pub fn replica_with_metrics(&self, envs: &[(&str, &str)]) -> (Replica, String) {
        assert!(self.db.is_some(), "replicas share a Postgres database");
        let metrics = free_loopback();
        let mut args = self.args.clone();
        args.extend(["--metrics-listen".to_owned(), metrics.clone()]);
        let mut all = self.envs.clone();
        all.extend(envs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let (child, addr) = spawn(self.root.path(), &args, &all);
        (Replica { child, addr }, metrics)
    }

    /// Starts with `--metrics-listen` on a free port, plus `args`; the
    /// metrics address is the second value.
    pub fn start_with_metrics(args: &[&str]) -> (Self, String) {
        let metrics = free_loopback();
        let mut all = vec!["--metrics-listen", metrics.as_str()];
        all.extend_from_slice(args);
        (Self::start(&all), metrics)
    }

    pub fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("server.log")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then start again on the same data folder.
    pub fn kill9_and_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let (child, addr) = spawn(self.root.path(), &self.args, &self.envs);
        self.child = child;
        self.addr = addr;
    }

    /// Kills the process if it still runs (SIGKILL), then starts again on
    /// the same data folder with these environment variables instead (and
    /// those that reach its bucket, if it has one).
    pub fn restart_env(&mut self, envs: &[(&str, &str)]) {
        let _ = self.child.kill();
        self.child.wait().unwrap();
        self.envs = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(s3) = &self.s3 {
            self.envs
                .extend(s3.envs().into_iter().map(|(k, v)| (k.to_owned(), v)));
        }
        let (child, addr) = spawn(self.root.path(), &self.args, &self.envs);
        self.child = child;
        self.addr = addr;
    }

    /// Replaces the server flag `flag` and its value (or drops it, for
    /// `None`) for the next [`TestServer::start_again`].
    pub fn set_flag(&mut self, flag: &str, value: Option<&str>) {
        let mut args = std::mem::take(&mut self.args).into_iter();
        while let Some(a) = args.next() {
            if a == flag {
                args.next();
            } else {
                self.args.push(a);
            }
        }
        if let Some(v) = value {
            self.args.extend([flag.to_owned(), v.to_owned()]);
        }
    }

    /// Kills the process (SIGKILL) and waits for it, leaving the data
    /// folder to be changed before [`TestServer::start_again`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        self.child.wait().unwrap();
    }

    /// Starts again on the same data folder, flags and environment.
    pub fn start_again(&mut self) {
        let (child, addr) = spawn(self.root.path(), &self.args, &self.envs);
        self.child = child;
        self.addr = addr;
    }

    /// Waits for the process to end by itself.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// The body pack files in the data folder.
    pub fn packs(&self) -> Vec<PathBuf> {
        let mut p = files_under(&self.store_dir().join("bodies"));
        p.sort();
        p
    }

    /// Where the bodies (`bodies/`) and blobs (`blobs/`) of this server are
    /// as files: the data folder, or, on a bucket, the folder the S3 test
    /// server keeps that bucket's objects in (one file per object).
    pub fn store_dir(&self) -> PathBuf {
        match &self.s3 {
            Some(s3) => s3.root.path().join(crate::s3::BUCKET).join("server"),
            None => self.data(),
        }
    }

    /// [`Self::store_dir`]'s `blobs/`.
    pub fn blobs_dir(&self) -> PathBuf {
        self.store_dir().join("blobs")
    }

    /// The same client, pointed at this server's current address.
    pub fn rebase(&self, api: &Api) -> Api {
        Api {
            base: self.url(""),
            ..api.clone()
        }
    }

    /// Waits for a process already sent SIGTERM.
    pub fn terminate_wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    pub fn anon(&self) -> Api {
        Api {
            http: http(),
            base: self.url(""),
            token: None,
        }
    }

    pub async fn register(&self, user: &str) -> Api {
        let mut api = self.anon();
        let (st, v) = api
            .post(
                "/api/v1/register",
                json!({"user": user, "password": PASSWORD, "device": "first"}),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        api.token = Some(v["token"].as_str().unwrap().to_owned());
        api
    }
}

/// The text of a scrape of the metrics listener at `addr`.
pub async fn scrape(addr: &str) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A loopback address whose port was free a moment ago.
fn free_loopback() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

pub fn spawn(root: &Path, args: &[String], envs: &[(String, String)]) -> (Child, String) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("server.log"))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(root.join("data"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .env_remove("EVI_SERVER_REGISTRATION")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = listening_on(&mut child);
    (child, addr)
}

/// The address a server just started with `--listen 127.0.0.1:0` prints
/// first on stdout; the rest of its stdout is read away, so it never
/// blocks on a full pipe.
pub fn listening_on(child: &mut Child) -> String {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = out.read_to_end(&mut sink);
    });
    addr
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

impl Api {
    pub fn with_token(&self, token: &str) -> Api {
        Api {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let st = resp.status();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (st, v)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put_blob(&self, name: &str, data: Vec<u8>) -> (StatusCode, Value) {
        let resp = self
            .http
            .put(format!("{}/api/v1/blobs/{name}", self.base))
            .bearer_auth(self.token.as_deref().unwrap())
            .body(data)
            .send()
            .await
            .unwrap();
        let st = resp.status();
        (st, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn get_blob(&self, name: &str) -> (StatusCode, Vec<u8>) {
        let resp = self
            .http
            .get(format!("{}/api/v1/blobs/{name}", self.base))
            .bearer_auth(self.token.as_deref().unwrap())
            .send()
            .await
            .unwrap();
        (resp.status(), resp.bytes().await.unwrap().to_vec())
    }

    /// Pushes segments built by [`segment`]; asserts 200.
    pub async fn push(&self, segments: Vec<Value>) -> Value {
        let (st, v) = self
            .post("/api/v1/records", json!({ "segments": segments }))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v
    }

    /// Every record after `after`, following cursors with page size `limit`.
    pub async fn pull_all(&self, limit: Option<u32>) -> (Vec<Value>, usize) {
        let mut after = 0u64;
        let mut out = Vec::new();
        let mut pages = 0;
        loop {
            let q = match limit {
                Some(l) => format!("/api/v1/records?after={after}&limit={l}"),
                None => format!("/api/v1/records?after={after}"),
            };
            let (st, v) = self.get(&q).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            pages += 1;
            let recs = v["records"].as_array().unwrap().clone();
            after = v["next_after"].as_u64().unwrap();
            let more = v["more"].as_bool().unwrap();
            out.extend(recs);
            if !more {
                return (out, pages);
            }
            assert!(pages < 10_000, "pagination does not end");
        }
    }
}

/// A keyed id made from a tag and a number (always holding hex letters, so
/// its uppercase form differs).
pub fn kid(tag: u8, n: u64) -> String {
    let mut b = [tag; 32];
    b[..8].copy_from_slice(&n.to_be_bytes());
    b[31] = 0xab;
    KeyedId::from_bytes(b).to_string()
}

/// A segment JSON value with one entry id and `len` bytes of ciphertext.
pub fn segment(stream: u64, entry: u64, len: usize) -> Value {
    use base64::Engine as _;
    let ct = vec![(entry % 251) as u8; len];
    json!({
        "stream": kid(1, stream),
        "kind": "entries",
        "entry_ids": [kid(2, entry)],
        "ciphertext": base64::engine::general_purpose::STANDARD.encode(ct),
    })
}

/// A tombstone (`forget` or `unforget`) of stream `stream`.
pub fn tombstone(kind: &str, stream: u64, entry: u64) -> Value {
    let mut s = segment(stream, entry, 32);
    s["kind"] = json!(kind);
    s["entry_ids"] = json!([kid(3, entry)]);
    s
}

/// Polls `POST /api/v1/blobs/missing` for `names` until it answers `want`
/// (a blob is collected in the background once nothing refers to it), for
/// up to 10 s; the last answer.
pub async fn missing_blobs_become(a: &Api, names: &[&str], want: &[&str]) -> Value {
    let mut missing = Value::Null;
    for _ in 0..100 {
        missing = a
            .post("/api/v1/blobs/missing", json!({ "names": names }))
            .await
            .1["missing"]
            .take();
        if missing == json!(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    missing
}

/// (stream, kind) of every record the account holds, in seq order.
pub async fn held(a: &Api) -> Vec<(String, String)> {
    let (records, _) = a.pull_all(None).await;
    records
        .iter()
        .map(|r| {
            (
                r["stream"].as_str().unwrap().to_owned(),
                r["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The value of an unlabelled metric (`evi_server_NAME`) on the metrics
/// listener at `addr`.
pub async fn metric(addr: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let full = format!("evi_server_{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&full))
        .unwrap_or_else(|| panic!("no metric {full:?} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends raw bytes on a fresh connection and returns what came back before
/// the server closed it (or `read_reply` is false: nothing, after sending).
pub fn raw_http(addr: &str, request: &[u8], read_reply: bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request).unwrap();
    if !read_reply {
        return String::new();
    }
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Polls `f` for up to 10 s (used only to wait for what the server does
/// behind a connection, such as noticing it dropped or sending an upload's
/// parts on, never for readiness).
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    f()
}

// ---------------------------------------------------------------------------
// What a server holds, read behind its back on either backend, so that one
// test checks the SQLite file and packs or the Postgres rows and bucket.

/// One record row's body pointer: (user id, pack, offset, length).
pub type BodyRow = (i64, String, i64, i64);

impl TestServer {
    /// Every record row whose body is in the body store, as the metadata
    /// store holds it: rusqlite on the SQLite file, SQL on Postgres (both
    /// schemas name the columns alike).
    pub fn body_rows(&self) -> Vec<BodyRow> {
        const SQL: &str = "SELECT user_id, body_pack, body_offset, body_len FROM records \
                           WHERE body_pack IS NOT NULL ORDER BY user_id, seq";
        match &self.db {
            Some(db) => pg_exec(&db.url, SQL)
                .into_iter()
                .map(|r| {
                    let int = |i: usize| r[i].as_deref().unwrap().parse::<i64>().unwrap();
                    (int(0), r[1].clone().unwrap(), int(2), int(3))
                })
                .collect(),
            None => {
                let db = rusqlite::Connection::open_with_flags(
                    self.data().join("evi-server.sqlite3"),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                )
                .unwrap();
                let mut st = db.prepare(SQL).unwrap();
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap()
            }
        }
    }

    /// Every record row's body is in place: its pack (a file in the data
    /// folder, or an object in the bucket) exists and holds the bytes the
    /// row points at. Returns how many rows point into packs.
    pub fn assert_every_row_has_its_body(&self) -> usize {
        let rows = self.body_rows();
        for (user, pack, offset, len) in &rows {
            let path = self
                .store_dir()
                .join("bodies")
                .join(user.to_string())
                .join(pack);
            let size = std::fs::metadata(&path)
                .unwrap_or_else(|e| panic!("row points at missing pack {}: {e}", path.display()))
                .len();
            assert!(size >= (offset + len) as u64, "pack {pack} too short");
        }
        rows.len()
    }

    /// Everything the server keeps, as (where, bytes): each file of its
    /// data folder; with Postgres, a `pg_dump` of its database; with a
    /// bucket, each object (a file of the S3 test server's folder).
    pub fn stored_bytes(&self) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = files_under(&self.data())
            .into_iter()
            .map(|f| (f.display().to_string(), std::fs::read(&f).unwrap()))
            .collect();
        if let Some(db) = &self.db {
            let dump = Command::new("pg_dump")
                .args(["--data-only", "--inserts", &db.url])
                .output()
                .expect("run pg_dump (apt-get install postgresql-client)");
            assert!(
                dump.status.success(),
                "pg_dump: {}",
                String::from_utf8_lossy(&dump.stderr)
            );
            out.push((format!("pg_dump of {}", db.name()), dump.stdout));
        }
        if let Some(s3) = &self.s3 {
            for f in files_under(s3.root.path()) {
                out.push((f.display().to_string(), std::fs::read(&f).unwrap()));
            }
        }
        out
    }

    /// `--store`'s value as the start-up log shows it.
    pub fn store_label(&self) -> String {
        match self.s3 {
            Some(_) => format!("s3://{}/server", crate::s3::BUCKET),
            None => "data-folder".to_owned(),
        }
    }
}

/// An HTTP client for the tests. reqwest is built without a TLS provider of
/// its own (see the server's Cargo.toml), so ring is installed first, as the
/// server does.
pub fn http() -> reqwest::Client {
    evi_server::storage::install_tls_provider();
    reqwest::Client::new()
}

/// `reqwest::get` through [`http`].
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    http().get(url).send().await
}
