//! Stateless replicas (issue 22): two `evi-server` processes on one Postgres
//! and one S3-compatible bucket (s3s-fs), behind a round-robin TCP proxy that
//! stands for the operator's load balancer (a connection it cannot open to
//! one replica goes to the other, as Caddy's `lb_try_duration` does). The
//! devices know one URL, the proxy's.
//!
//! - six devices pushing, pulling and watching through both at random for
//!   20 rounds converge, every entry stored once, and every watcher holds
//!   every other device's lines;
//! - a replica SIGKILLed during a push and during a pull: the client's
//!   retries land on the other, and nothing is lost or doubled;
//! - Postgres gone (every connection to it cut, as a restart does) while
//!   devices sync: the replicas answer 503 meanwhile, recover by themselves,
//!   and a long poll parked on one is woken again by a push through the
//!   other (the listener subscribed anew).
//!
//! Their servers are on Postgres in every run (not in `ON_POSTGRES`, main.rs);
//! without `EVI_TEST_POSTGRES_URL` the tests are built ignored (`tests/build.rs`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{
    Device, Rng, assert_converged, held, spawn_server, stored_entry_ids_at, today,
};
use crate::pg_db::TestDb;
use crate::s3::S3Server;

/// A TCP proxy over loopback: each connection goes to the next upstream in
/// turn that accepts it. `cut` closes every open connection and refuses new
/// ones until `restore`: what clients see of a restarting server.
pub struct Proxy {
    pub addr: String,
    upstreams: Arc<Mutex<Vec<String>>>,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstreams: Vec<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upstreams = Arc::new(Mutex::new(upstreams));
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let (u, c, o, s) = (upstreams.clone(), cut.clone(), open.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                if c.load(Ordering::Relaxed) {
                    let _ = conn.shutdown(Shutdown::Both);
                    continue;
                }
                let ups = u.lock().unwrap().clone();
                let first = next.fetch_add(1, Ordering::Relaxed);
                let up = (0..ups.len())
                    .map(|i| &ups[(first + i) % ups.len()])
                    .find_map(|a| TcpStream::connect(a).ok());
                let Some(up) = up else {
                    let _ = conn.shutdown(Shutdown::Both);
                    continue;
                };
                {
                    let mut open = o.lock().unwrap();
                    open.retain(|s| s.peer_addr().is_ok());
                    open.push(conn.try_clone().unwrap());
                    open.push(up.try_clone().unwrap());
                }
                pipe(conn.try_clone().unwrap(), up.try_clone().unwrap());
                pipe(up, conn);
            }
        });
        Self {
            addr,
            upstreams,
            cut,
            open,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::Relaxed);
    }

    pub fn set_upstreams(&self, ups: Vec<String>) {
        *self.upstreams.lock().unwrap() = ups;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
        let _ = TcpStream::connect(&self.addr);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Two replicas on one database (reached through `db_proxy`, so a test can
/// cut it) and one bucket, behind `front`.
struct Replicas {
    db: TestDb,
    db_proxy: Proxy,
    s3: S3Server,
    servers: Vec<Option<Child>>,
    addrs: Vec<String>,
    data: Vec<tempfile::TempDir>,
    front: Proxy,
}

impl Replicas {
    fn start() -> Option<Self> {
        let s3 = S3Server::start()?;
        let db = TestDb::create();
        let pg_addr = db
            .url
            .split('@')
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or("127.0.0.1:5432")
            .to_owned();
        let db_proxy = Proxy::start(vec![pg_addr.clone()]);
        let mut r = Self {
            front: Proxy::start(Vec::new()),
            db_proxy,
            db,
            s3,
            servers: vec![None, None],
            addrs: vec![String::new(), String::new()],
            data: vec![tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()],
        };
        for i in 0..2 {
            r.start_replica(i, "127.0.0.1:0");
        }
        r.front.set_upstreams(r.addrs.clone());
        Some(r)
    }

    fn database_url(&self) -> String {
        let (user, rest) = self.db.url.split_once('@').expect("user@host in the URL");
        let db = rest.split_once('/').map_or("", |(_, d)| d);
        format!("{user}@{}/{db}", self.db_proxy.addr)
    }

    fn start_replica(&mut self, i: usize, listen: &str) {
        let url = self.database_url();
        let (store, env) = self.s3.server_args("replicas");
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (child, u) = spawn_server(
            self.data[i].path(),
            listen,
            &["--database", &url, "--store", &store],
            &env,
            None,
        );
        self.servers[i] = Some(child);
        self.addrs[i] = u.trim_start_matches("http://").to_owned();
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self, i: usize) {
        self.kill(i);
        let addr = self.addrs[i].clone();
        for _ in 0..100 {
            if TcpListener::bind(&addr).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.start_replica(i, &addr);
    }

    fn url(&self) -> String {
        self.front.url()
    }

    fn replica_url(&self, i: usize) -> String {
        format!("http://{}", self.addrs[i])
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for i in 0..2 {
            self.kill(i);
        }
    }
}

/// The device name of device `i`.
fn name(i: usize) -> String {
    format!("dev{i}")
}

fn session(i: usize) -> String {
    format!("01JREP{i:020}")
}

fn rel(i: usize) -> String {
    format!("transcripts/{}/{}.jsonl", today(), session(i))
}

fn line(dev: usize, n: usize) -> String {
    format!(
        "{{\"role\":\"user\",\"content\":\"from {} line {n}\",\"ts\":\"{}T10:{:02}:{:02}Z\"}}\n",
        name(dev),
        today(),
        n / 60 % 60,
        n % 60
    )
}

fn holds(dev: &Device, session_of: usize, text: &str) -> bool {
    held(dev, &session(session_of))
        .iter()
        .any(|h| String::from_utf8_lossy(&h.content).contains(text))
}

#[test]
#[cfg_attr(
    evi_no_postgres,
    ignore = "needs EVI_TEST_POSTGRES_URL (a Postgres to create databases on)"
)]
fn six_devices_through_two_replicas_converge_and_every_watcher_sees_every_line() {
    let Some(r) = Replicas::start() else {
        return;
    };
    let devs: Vec<Device> = (0..6).map(|_| Device::new()).collect();
    devs[0].init_url(&r.url(), "pat", &name(0));
    for (i, d) in devs.iter().enumerate().skip(1) {
        d.join_copying_key(&devs[0], &r.url(), "pat", &name(i));
    }
    // Two of them watch: their long polls land on either replica.
    let mut watchers: Vec<Child> = devs[4..]
        .iter()
        .map(|d| {
            d.sync_cmd()
                .args([
                    "sync",
                    "watch",
                    "--scan-secs",
                    "600",
                    "--backoff-max-secs",
                    "1",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut rng = Rng::new(22);
    let mut written = [0usize; 6];
    for _round in 0..20 {
        for (i, d) in devs.iter().enumerate() {
            if rng.range(0, 3) > 0 {
                d.append(&rel(i), line(i, written[i]).as_bytes());
                written[i] += 1;
            }
            // The watchers sync themselves; the others push, pull or both.
            if i < 4 {
                match rng.range(0, 3) {
                    0 => {
                        d.sync_ok(&["push"]);
                    }
                    1 => {
                        d.sync_ok(&["pull"]);
                    }
                    _ => {
                        d.sync_ok(&["push"]);
                        d.sync_ok(&["pull"]);
                    }
                }
            }
        }
    }
    for d in &devs[..4] {
        d.sync_ok(&["push"]);
    }
    // Every watcher gets every other device's last line by itself.
    let end = Instant::now() + Duration::from_secs(60);
    for w in &devs[4..] {
        for (j, n) in written.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let last = format!("from {} line {}", name(j), n - 1);
            while !holds(w, j, &last) {
                assert!(Instant::now() < end, "a watcher never got {last}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    for w in &mut watchers {
        let _ = w.kill();
        let _ = w.wait();
    }
    for d in &devs {
        d.sync_ok(&["push"]);
    }
    for d in &devs {
        d.sync_ok(&["pull"]);
    }
    for d in &devs[1..] {
        assert_converged(&devs[0], d, "six devices through two replicas");
    }
    for (j, n) in written.iter().enumerate() {
        for k in 0..*n {
            assert!(
                holds(&devs[0], j, &format!("from {} line {k}\"", name(j))),
                "line {k} of {} missing",
                name(j)
            );
        }
    }
    // Each entry once on the server, read through each replica alike.
    let token = devs[0].token();
    let a = stored_entry_ids_at(&r.replica_url(0), &token);
    let b = stored_entry_ids_at(&r.replica_url(1), &token);
    crate::common::assert_each_once(&a, "entries through replica 1");
    assert_eq!(a, b, "the replicas serve the same records");
    assert_eq!(a.len(), written.iter().sum::<usize>());
}

#[test]
#[cfg_attr(
    evi_no_postgres,
    ignore = "needs EVI_TEST_POSTGRES_URL (a Postgres to create databases on)"
)]
fn a_replica_killed_during_a_push_and_a_pull_loses_and_doubles_nothing() {
    let Some(mut r) = Replicas::start() else {
        return;
    };
    let (a, b) = (Device::new(), Device::new());
    a.init_url(&r.url(), "pat", "laptop");
    b.join_copying_key(&a, &r.url(), "pat", "desktop");
    a.generate(&[
        "--sessions",
        "60",
        "--total-mb",
        "12",
        "--big-mb",
        "3",
        "--seed",
        "9",
    ]);
    // Killed while the push is under way; it is started again after, as an
    // operator's orchestrator does.
    let push = a.sync_cmd().args(["sync", "push"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    r.kill(0);
    let out = push.wait_with_output().unwrap();
    if !out.status.success() {
        // A push cut mid-request may fail after its retries: the next one
        // sends what is left.
        a.sync_ok(&["push"]);
    }
    r.restart(0);
    let pull = b.sync_cmd().args(["sync", "pull"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    r.kill(1);
    let out = pull.wait_with_output().unwrap();
    if !out.status.success() {
        b.sync_ok(&["pull"]);
    }
    r.restart(1);
    b.sync_ok(&["pull"]);
    assert_converged(&a, &b, "across a replica killed twice");
    let ids = stored_entry_ids_at(&r.replica_url(0), &a.token());
    crate::common::assert_each_once(&ids, "entries after the kills");
}

#[test]
#[cfg_attr(
    evi_no_postgres,
    ignore = "needs EVI_TEST_POSTGRES_URL (a Postgres to create databases on)"
)]
fn replicas_answer_503_while_postgres_is_gone_and_recover_by_themselves() {
    let Some(r) = Replicas::start() else {
        return;
    };
    let (a, b) = (Device::new(), Device::new());
    a.init_url(&r.replica_url(0), "pat", "laptop");
    b.join_copying_key(&a, &r.replica_url(1), "pat", "desktop");
    a.append(&rel(0), line(0, 0).as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);

    r.db_proxy.cut();
    let status = crate::common::http()
        .get(format!("{}/api/v1/status", r.replica_url(0)))
        .bearer_auth(a.token())
        .timeout(Duration::from_secs(30))
        .send()
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 503, "while the database is gone");
    std::thread::sleep(Duration::from_secs(2));
    r.db_proxy.restore();

    // The desktop's watcher parks on replica 2; a push through replica 1
    // must wake it: its listener subscribed again.
    let mut w = b
        .sync_cmd()
        .args([
            "sync",
            "watch",
            "--scan-secs",
            "600",
            "--backoff-max-secs",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    let mut n = 1;
    loop {
        // Until the replica answers again, a push fails and is retried.
        a.append(&rel(0), line(0, n).as_bytes());
        let pushed = a.sync(&["sync", "push"]).code == 0;
        if pushed {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until && !holds(&b, 0, &format!("line {n}\"")) {
                std::thread::sleep(Duration::from_millis(100));
            }
            if holds(&b, 0, &format!("line {n}\"")) {
                break;
            }
        }
        assert!(Instant::now() < end, "the replicas did not recover");
        n += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = w.kill();
    let _ = w.wait();
}
