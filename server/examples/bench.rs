//! Push/pull throughput and status latency of evi-server over loopback.
//!
//! Runs the real server (the library's `serve`, on its own runtime) on a temp
//! data folder, then for 1, 8 and 64 concurrent clients (one account each)
//! pushes batches of 100 records of 1 KiB ciphertext, pulls them all back in
//! pages, and meanwhile times `GET /api/v1/status` from one more client.
//! Push and pull use the framed wire (`application/vnd.evi.frames`).
//!
//!     cargo run --release -p evi-server --example bench

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use evi_server::Config;
use evi_server::config::RateLimits;
use evi_shared::KeyedId;
use evi_shared::api::{AuthResponse, PushResponse, RegisterRequest, Registration};
use evi_shared::frames::{self, FrameReader, PageEnd, SegmentHead, Tag};

const RECORD_BYTES: usize = 1024;
const BATCH: usize = 100;
const TOTAL_RECORDS: usize = 25_600;

fn id(a: u64, b: u64, c: u8) -> KeyedId {
    let mut x = [c; 32];
    x[..8].copy_from_slice(&a.to_be_bytes());
    x[8..16].copy_from_slice(&b.to_be_bytes());
    KeyedId::from_bytes(x)
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn register(base: &str, user: String) -> Self {
        let http = reqwest::Client::new();
        let r: AuthResponse = fetch_json(http.post(format!("{base}/api/v1/register")).json(
            &RegisterRequest {
                user,
                password: "bench password".into(),
                device: "bench".into(),
                invite: None,
            },
        ))
        .await;
        Self {
            http,
            base: base.to_owned(),
            token: r.token,
        }
    }

    /// A framed push of a body built up front.
    async fn push(&self, body: &[u8]) -> PushResponse {
        fetch_json(
            self.http
                .post(format!("{}/api/v1/records", self.base))
                .bearer_auth(&self.token)
                .header("content-type", frames::CONTENT_TYPE)
                .body(body.to_vec()),
        )
        .await
    }

    /// Every record in framed pages; returns (records, ciphertext bytes).
    async fn pull_all(&self) -> (usize, usize) {
        let (mut after, mut n, mut bytes) = (0, 0, 0);
        loop {
            let body = self
                .http
                .get(format!("{}/api/v1/records?after={after}", self.base))
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
            let mut r = FrameReader::new(&body[..], u32::MAX);
            let mut end = None;
            while let Some(f) = r.next_frame().unwrap() {
                match f.tag {
                    Tag::Record => {
                        n += 1;
                        bytes += f.body.len();
                    }
                    Tag::End => end = Some(f.head::<PageEnd>().unwrap()),
                    Tag::Segment => panic!("segment frame in a page"),
                }
            }
            let end = end.expect("end frame");
            after = end.next_after;
            if !end.more {
                return (n, bytes);
            }
        }
    }

    async fn status_ms(&self) -> f64 {
        let t = Instant::now();
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
        t.elapsed().as_secs_f64() * 1000.0
    }
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

/// Times status calls until `stop`; returns (p50, p99, count).
async fn probe(c: Arc<Client>, stop: Arc<AtomicBool>) -> (f64, f64, usize) {
    let mut v = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        v.push(c.status_ms().await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| {
        v.get(((v.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    (q(0.5), q(0.99), v.len())
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path().join("data"));
    config.registration = Registration::Open;
    config.rate_limits = RateLimits {
        per_ip_per_minute: 100_000,
        per_user_per_minute: 100_000,
        ..RateLimits::default()
    };
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = server_rt.spawn(evi_server::serve(listener, config, async {
        let _ = stop_rx.await;
    }));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| clients | push records/s | push MB/s | pull records/s | pull MB/s | status p50 ms (push) | status p99 ms (push) | status p50 ms (pull) | status p99 ms (pull) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    rt.block_on(async {
        let prober = Arc::new(Client::register(&base, "prober".into()).await);
        for clients in [1usize, 8, 64] {
            let mut cs = Vec::new();
            for i in 0..clients {
                cs.push(Arc::new(Client::register(&base, format!("u{clients}-{i}")).await));
            }
            let batches = (TOTAL_RECORDS / BATCH / clients).max(1);
            // Payloads built up front so only the HTTP and storage are timed.
            let payloads: Vec<Vec<Vec<u8>>> = (0..clients)
                .map(|c| {
                    (0..batches)
                        .map(|b| {
                            let mut body = frames::start_body();
                            for r in 0..BATCH {
                                let n = (b * BATCH + r) as u64;
                                let head = SegmentHead {
                                    stream: id(c as u64, 0, 1),
                                    kind: "entries".into(),
                                    entry_ids: vec![id(c as u64, n, 2)],
                                };
                                let ct = vec![n as u8; RECORD_BYTES];
                                frames::write_frame(&mut body, Tag::Segment, &head, &ct);
                            }
                            frames::write_frame(&mut body, Tag::End, &serde_json::json!({}), &[]);
                            body
                        })
                        .collect()
                })
                .collect();
            let records = clients * batches * BATCH;
            let mb = (records * RECORD_BYTES) as f64 / 1e6;

            let stop = Arc::new(AtomicBool::new(false));
            let p = tokio::spawn(probe(prober.clone(), stop.clone()));
            let t = Instant::now();
            let tasks: Vec<_> = cs
                .iter()
                .cloned()
                .zip(payloads)
                .map(|(c, batches)| {
                    tokio::spawn(async move {
                        for b in &batches {
                            assert_eq!(c.push(b).await.stored, BATCH as u64);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let push_s = t.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let (push_p50, push_p99, _) = p.await.unwrap();

            let stop = Arc::new(AtomicBool::new(false));
            let p = tokio::spawn(probe(prober.clone(), stop.clone()));
            let t = Instant::now();
            let tasks: Vec<_> = cs
                .iter()
                .cloned()
                .map(|c| tokio::spawn(async move { c.pull_all().await }))
                .collect();
            let mut pulled = 0;
            for t in tasks {
                pulled += t.await.unwrap().0;
            }
            let pull_s = t.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let (pull_p50, pull_p99, _) = p.await.unwrap();
            assert_eq!(pulled, records);
            println!(
                "| {clients} | {:.0} | {:.1} | {:.0} | {:.1} | {push_p50:.2} | {push_p99:.2} | {pull_p50:.2} | {pull_p99:.2} |",
                records as f64 / push_s,
                mb / push_s,
                records as f64 / pull_s,
                mb / pull_s,
            );
        }
    });
    let _ = stop_tx.send(());
    server_rt.block_on(server).unwrap().unwrap();
}
