//! Load on one evi-server over loopback: records at the sizes a real client
//! sends, pushed and pulled by 1, 8 and 64 devices at once, then 64 devices
//! pushing and pulling at the same time. Every push call and every pull call
//! is timed (p50, p99, max); throughput is records/s and MB/s of ciphertext.
//!
//! Each phase runs against a fresh server (the library's `serve`, on its own
//! runtime, with a temp data folder that is deleted afterwards, so the disk
//! holds one phase's data at a time). Push and pull use the framed wire
//! (`application/vnd.evi.frames`). Meanwhile one more client times
//! `GET /api/v1/status`. Every phase checks what it measured: each device
//! pulls back exactly the records its account pushed, each once, whole.
//!
//!     cargo run --release -p evi-server --example bench
//!
//! Sizes come from the environment, with defaults from the real client
//! (`cli/src/sync/engine/uploader.rs`: segments of up to 4 MiB plaintext, batches
//! up to 90% of the server's 8 MiB `max_batch_bytes`; the generated 417 MB
//! home of `bench/sync.sh` went up as 2,076 records of 131 entries each in
//! about 50 batches, so about 100 KB of ciphertext per record):
//!
//! - `RECORD_BYTES` (100000): ciphertext bytes per record;
//! - `BATCH` (60): records per push;
//! - `ENTRIES` (130): entry ids per record;
//! - `TOTAL_RECORDS` (15360): records pushed in each of the 1/8/64 phases,
//!   split evenly between the devices;
//! - `MIXED_ROUNDS` (4): push-then-pull rounds per device in the mixed phase.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use evi_server::Config;
use evi_server::config::RateLimits;
use evi_shared::KeyedId;
use evi_shared::api::{AuthResponse, LoginRequest, PushResponse, RegisterRequest, Registration};
use evi_shared::frames::{self, FrameReader, PageEnd, RecordHead, SegmentHead, Tag};
use evi_shared::limits::DEFAULT_MAX_BATCH_BYTES;

const PASSWORD: &str = "bench password";

/// What the run sends, from the environment.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    record_bytes: usize,
    batch: usize,
    entries: usize,
    total_records: usize,
    mixed_rounds: usize,
}

impl Sizes {
    fn from_env() -> Self {
        let get = |name: &str, default: usize| {
            match std::env::var(name) {
            Ok(v) => v.parse::<usize>().ok().filter(|&n| n > 0).unwrap_or_else(|| {
                eprintln!("{name}={v:?} is not a positive whole number; unset it or give e.g. {name}={default}");
                std::process::exit(2);
            }),
            Err(_) => default,
        }
        };
        let s = Self {
            record_bytes: get("RECORD_BYTES", 100_000),
            batch: get("BATCH", 60),
            entries: get("ENTRIES", 130),
            total_records: get("TOTAL_RECORDS", 15_360),
            mixed_rounds: get("MIXED_ROUNDS", 4),
        };
        if s.record_bytes < 16 {
            eprintln!("RECORD_BYTES must be at least 16 (each record carries its own tag)");
            std::process::exit(2);
        }
        // The client never cuts a batch past 90% of the server's limit.
        let body = batch_body(&s, 0, 0, &vec![0; s.record_bytes]).len() as u64;
        let room = DEFAULT_MAX_BATCH_BYTES * 9 / 10;
        if body > room {
            eprintln!(
                "a batch of BATCH={} records of RECORD_BYTES={} is {body} bytes, over the client's \
                 {room} (90% of the server's max_batch_bytes): lower BATCH or RECORD_BYTES",
                s.batch, s.record_bytes
            );
            std::process::exit(2);
        }
        s
    }
}

fn id(a: u64, b: u64, c: u8) -> KeyedId {
    let mut x = [c; 32];
    x[..8].copy_from_slice(&a.to_be_bytes());
    x[8..16].copy_from_slice(&b.to_be_bytes());
    KeyedId::from_bytes(x)
}

/// Bytes that do not compress, so nothing on the way can shrink them.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Batch `batch_no` of `device`: each record's ciphertext starts with
/// (device, record number), which is what the pull side checks.
fn batch_body(s: &Sizes, device: u64, batch_no: usize, template: &[u8]) -> Vec<u8> {
    let mut body = frames::start_body();
    let mut ct = template.to_vec();
    for r in 0..s.batch {
        let n = (batch_no * s.batch + r) as u64;
        let head = SegmentHead {
            stream: id(device, n % 20, 1),
            kind: "entries".into(),
            entry_ids: (0..s.entries as u64)
                .map(|e| id(device, n * s.entries as u64 + e, 2))
                .collect(),
            refs: Default::default(),
            group: None,
        };
        ct[..8].copy_from_slice(&device.to_be_bytes());
        ct[8..16].copy_from_slice(&n.to_be_bytes());
        frames::write_frame(&mut body, Tag::Segment, &head, &ct);
    }
    frames::write_frame(&mut body, Tag::End, &serde_json::json!({}), &[]);
    body
}

/// One device: its own connection pool, token and pull cursor.
struct Device {
    http: reqwest::Client,
    base: String,
    token: String,
    after: u64,
}

/// What one device measured and pulled.
#[derive(Default)]
struct Tally {
    push_ms: Vec<f64>,
    pull_ms: Vec<f64>,
    pushed: usize,
    /// (device, record number) of every record pulled, from its ciphertext.
    pulled: Vec<(u64, u64)>,
    pulled_bytes: usize,
}

impl Device {
    async fn register(base: &str, user: String) -> Self {
        let http = reqwest::Client::new();
        let r: AuthResponse = fetch_json(http.post(format!("{base}/api/v1/register")).json(
            &RegisterRequest {
                user,
                password: PASSWORD.into(),
                device: "bench-a".into(),
                invite: None,
            },
        ))
        .await;
        Self::new(http, base, r.token)
    }

    /// A second device on an existing account.
    async fn login(base: &str, user: String) -> Self {
        let http = reqwest::Client::new();
        let r: AuthResponse = fetch_json(http.post(format!("{base}/api/v1/login")).json(
            &LoginRequest {
                user,
                password: PASSWORD.into(),
                device: "bench-b".into(),
            },
        ))
        .await;
        Self::new(http, base, r.token)
    }

    fn new(http: reqwest::Client, base: &str, token: String) -> Self {
        Self {
            http,
            base: base.to_owned(),
            token,
            after: 0,
        }
    }

    /// One push call, timed from the request to the parsed answer.
    async fn push(&self, body: Vec<u8>, expect: usize, t: &mut Tally) {
        let start = Instant::now();
        let r: PushResponse = fetch_json(
            self.http
                .post(format!("{}/api/v1/records", self.base))
                .bearer_auth(&self.token)
                .header("content-type", frames::CONTENT_TYPE)
                .body(body),
        )
        .await;
        t.push_ms.push(ms(start));
        assert_eq!(r.stored, expect as u64, "push stored {r:?}");
        t.pushed += expect;
    }

    /// Pulls pages until the server has nothing newer, timing each call
    /// from the request to the last byte of the page.
    async fn pull_new(&mut self, s: &Sizes, t: &mut Tally) {
        loop {
            let start = Instant::now();
            let page = self
                .http
                .get(format!("{}/api/v1/records?after={}", self.base, self.after))
                .bearer_auth(&self.token)
                .header("accept", frames::CONTENT_TYPE)
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .bytes()
                .await
                .unwrap();
            t.pull_ms.push(ms(start));
            let mut r = FrameReader::new(&page[..], u32::MAX);
            let mut end = None;
            while let Some(f) = r.next_frame().unwrap() {
                match f.tag {
                    Tag::Record => {
                        let head: RecordHead = f.head().unwrap();
                        assert!(
                            head.seq > self.after,
                            "seq {} after {}",
                            head.seq,
                            self.after
                        );
                        self.after = head.seq;
                        assert_eq!(head.entry_ids.len(), s.entries);
                        assert_eq!(f.body.len(), s.record_bytes);
                        let tag =
                            |i: usize| u64::from_be_bytes(f.body[i..i + 8].try_into().unwrap());
                        t.pulled.push((tag(0), tag(8)));
                        t.pulled_bytes += f.body.len();
                    }
                    Tag::End => end = Some(f.head::<PageEnd>().unwrap()),
                    Tag::Segment => panic!("segment frame in a page"),
                }
            }
            let end = end.expect("end frame");
            self.after = end.next_after;
            if !end.more {
                return;
            }
        }
    }

    async fn status_ms(&self) -> f64 {
        let start = Instant::now();
        self.http
            .get(format!("{}/api/v1/status", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .bytes()
            .await
            .unwrap();
        ms(start)
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Sends `rb`, insisting on success, and parses the JSON answer.
async fn fetch_json<T: serde::de::DeserializeOwned>(rb: reqwest::RequestBuilder) -> T {
    rb.send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Nearest-rank percentiles of call latencies.
#[derive(Clone, Copy)]
struct Spread {
    calls: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn spread(mut v: Vec<f64>) -> Spread {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| {
        let rank = ((p * v.len() as f64).ceil() as usize).max(1);
        v.get(rank - 1).copied().unwrap_or(0.0)
    };
    Spread {
        calls: v.len(),
        p50: q(0.5),
        p99: q(0.99),
        max: v.last().copied().unwrap_or(0.0),
    }
}

/// Times status calls (2 ms apart) while the measured work runs.
struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

impl Prober {
    fn start(d: Arc<Device>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut v = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                v.push(d.status_ms().await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            v
        });
        Self { stop, task }
    }

    async fn finish(self) -> Spread {
        self.stop.store(true, Ordering::Relaxed);
        spread(self.task.await.unwrap())
    }
}

/// A server on its own 2-thread runtime and temp data folder.
struct Server {
    rt: tokio::runtime::Runtime,
    base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::new(dir.path().join("data"));
        config.registration = Some(Registration::Open);
        config.rate_limits = RateLimits {
            per_ip_per_minute: 100_000,
            per_user_per_minute: 100_000,
            ..RateLimits::default()
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = rt.spawn(evi_server::serve(listener, config, async {
            let _ = stop_rx.await;
        }));
        Self {
            rt,
            base,
            stop,
            task,
            _dir: dir,
        }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        self.rt.block_on(self.task).unwrap().unwrap();
    }
}

/// One table row.
struct Row {
    phase: &'static str,
    devices: usize,
    call: &'static str,
    records: usize,
    bytes: usize,
    secs: f64,
    calls: Spread,
    status: Spread,
}

fn print_header() {
    println!(
        "| phase | devices | call | calls | records | records/s | MB/s | p50 ms | p99 ms | max ms | status p50 ms | status p99 ms |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

fn print_row(r: &Row) {
    println!(
        "| {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
        r.phase,
        r.devices,
        r.call,
        r.calls.calls,
        r.records,
        r.records as f64 / r.secs,
        r.bytes as f64 / 1e6 / r.secs,
        r.calls.p50,
        r.calls.p99,
        r.calls.max,
        r.status.p50,
        r.status.p99,
    );
}

/// `devices` devices, one account each: all push their share at once, then
/// all pull everything back at once.
async fn separate(s: Sizes, base: &str, devices: usize, template: Arc<Vec<u8>>) -> [Row; 2] {
    let prober = Arc::new(Device::register(base, "prober".into()).await);
    let mut ds = Vec::new();
    for i in 0..devices {
        ds.push(Device::register(base, format!("u{i}")).await);
    }
    let batches = (s.total_records / s.batch / devices).max(1);

    let p = Prober::start(prober.clone());
    let t = Instant::now();
    let tasks: Vec<_> = ds
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let template = template.clone();
            tokio::spawn(async move {
                let mut tally = Tally::default();
                for b in 0..batches {
                    let body = batch_body(&s, i as u64, b, &template);
                    d.push(body, s.batch, &mut tally).await;
                }
                (d, tally)
            })
        })
        .collect();
    let mut pushed = Vec::new();
    for task in tasks {
        pushed.push(task.await.unwrap());
    }
    let push_s = t.elapsed().as_secs_f64();
    let push_status = p.finish().await;

    let p = Prober::start(prober);
    let t = Instant::now();
    let tasks: Vec<_> = pushed
        .into_iter()
        .map(|(mut d, mut tally)| {
            tokio::spawn(async move {
                d.pull_new(&s, &mut tally).await;
                tally
            })
        })
        .collect();
    let mut tallies = Vec::new();
    for task in tasks {
        tallies.push(task.await.unwrap());
    }
    let pull_s = t.elapsed().as_secs_f64();
    let pull_status = p.finish().await;

    for (i, t) in tallies.iter_mut().enumerate() {
        verify(&mut t.pulled, &[(i as u64, t.pushed)]);
    }
    let records = tallies.iter().map(|t| t.pushed).sum::<usize>();
    let pulled_bytes = tallies.iter().map(|t| t.pulled_bytes).sum();
    let (push_ms, pull_ms) =
        tallies
            .into_iter()
            .fold((Vec::new(), Vec::new()), |(mut a, mut b), t| {
                a.extend(t.push_ms);
                b.extend(t.pull_ms);
                (a, b)
            });
    [
        Row {
            phase: "push",
            devices,
            call: "push",
            records,
            bytes: records * s.record_bytes,
            secs: push_s,
            calls: spread(push_ms),
            status: push_status,
        },
        Row {
            phase: "pull",
            devices,
            call: "pull",
            records,
            bytes: pulled_bytes,
            secs: pull_s,
            calls: spread(pull_ms),
            status: pull_status,
        },
    ]
}

/// 64 devices, two per account (a user with two machines): every device
/// pushes a batch, then pulls what is new (its own batch and its other
/// device's), `mixed_rounds` times, all at once. A last pull after the
/// phase (not timed) must bring each device up to its whole account.
async fn mixed(s: Sizes, base: &str, devices: usize, template: Arc<Vec<u8>>) -> [Row; 2] {
    let prober = Arc::new(Device::register(base, "prober".into()).await);
    let mut ds = Vec::new();
    for i in 0..devices {
        let user = format!("m{}", i / 2);
        ds.push(if i % 2 == 0 {
            Device::register(base, user).await
        } else {
            Device::login(base, user).await
        });
    }

    let p = Prober::start(prober);
    let t = Instant::now();
    let tasks: Vec<_> = ds
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            let template = template.clone();
            tokio::spawn(async move {
                let mut tally = Tally::default();
                for b in 0..s.mixed_rounds {
                    let body = batch_body(&s, i as u64, b, &template);
                    d.push(body, s.batch, &mut tally).await;
                    d.pull_new(&s, &mut tally).await;
                }
                (d, tally)
            })
        })
        .collect();
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    let status = p.finish().await;

    let pushed = s.mixed_rounds * s.batch;
    let pulled_in_phase = done.iter().map(|(_, t)| t.pulled.len()).sum::<usize>();
    let pulled_bytes = done.iter().map(|(_, t)| t.pulled_bytes).sum();
    let (mut push_ms, mut pull_ms) = (Vec::new(), Vec::new());
    for (i, (mut d, mut tally)) in done.into_iter().enumerate() {
        push_ms.append(&mut tally.push_ms);
        pull_ms.append(&mut tally.pull_ms);
        d.pull_new(&s, &mut tally).await;
        let pair = (i & !1) as u64;
        verify(&mut tally.pulled, &[(pair, pushed), (pair + 1, pushed)]);
    }
    let records = devices * pushed;
    [
        Row {
            phase: "mixed",
            devices,
            call: "push",
            records,
            bytes: records * s.record_bytes,
            secs,
            calls: spread(push_ms),
            status,
        },
        Row {
            phase: "mixed",
            devices,
            call: "pull",
            records: pulled_in_phase,
            bytes: pulled_bytes,
            secs,
            calls: spread(pull_ms),
            status,
        },
    ]
}

/// `pulled` holds exactly records 0..n of each (device, n) in `expect`,
/// each once.
fn verify(pulled: &mut [(u64, u64)], expect: &[(u64, usize)]) {
    pulled.sort_unstable();
    let want: Vec<(u64, u64)> = expect
        .iter()
        .flat_map(|&(d, n)| (0..n as u64).map(move |r| (d, r)))
        .collect();
    assert_eq!(pulled.len(), want.len(), "records pulled against pushed");
    assert!(pulled == want, "pulled records differ from the pushed ones");
}

fn main() {
    let s = Sizes::from_env();
    eprintln!("{s:?}");
    let template = Arc::new(noise(s.record_bytes));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    print_header();
    for devices in [1usize, 8, 64] {
        let server = Server::start();
        let rows = rt.block_on(separate(s, &server.base, devices, template.clone()));
        server.stop();
        rows.iter().for_each(print_row);
    }
    let server = Server::start();
    let rows = rt.block_on(mixed(s, &server.base, 64, template));
    server.stop();
    rows.iter().for_each(print_row);
}
