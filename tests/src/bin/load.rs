//! `evi-load`: many accounts against one or more evi-server replicas, for
//! `bench/server.sh` (server/BENCH.md). It speaks the wire protocol
//! directly with random opaque bytes where devices would send ciphertext:
//! the server never opens a record, so what it does per sync is the same,
//! and one process can stand for thousands of devices.
//!
//! ```text
//! evi-load syncs --servers URL[,URL…] [--accounts 1000] [--devices 3]
//!                [--rounds 5] [--concurrency 64] [--pids PID,…]
//! evi-load waits --servers URL[,URL…] [--accounts 1000] [--waits 10]
//!                [--sample 200] [--settle-secs 5]
//! ```
//!
//! `syncs`: each account registers and logs in its other devices (spread
//! over the servers), then every round each account has one device push a
//! segment of a few entries (1–4 KB) and the other devices pull after their
//! cursors: one sync. Prints one JSON line: syncs, wall seconds, syncs per
//! second, p50/p99 milliseconds of a sync (push and both pulls), and checks
//! that every device's cursor ends at the same seq; with `--pids`, the
//! servers' CPU milliseconds per sync over the rounds (set-up excluded).
//!
//! With `--hostile 1`, one more account attacks the server at full speed
//! while the rounds run, as issue 46's findings 1-4 did: damage reports of
//! 1,000 seqs against its 20,000 entries in a loop, pairing slots opened,
//! joined and asked for devices in a loop, `--trickle` (200) uploads that
//! send a byte every 10 s on connections of their own, and pairing long
//! polls parked in a loop. The JSON line then has what it got back per
//! attack (answers by status), so a bench shows what the others' p99 costs
//! under it (`bench/hostile.sh`).
//!
//! `waits`: each account has a waiting device and a pushing device; it
//! parks `--waits` long polls per account (10,000 for the defaults), spread
//! over the servers in turn, waits `--settle-secs` for them to be parked
//! (so the caller can read the servers' memory), then for `--sample`
//! accounts pushes through a server other than the one its waits are parked
//! on and times every wait of the account from the push's request to the
//! wait's answer: p50/p99 of that wake-up (the push's commit included). Prints one JSON line, and `parked` on
//! stderr once the waits are held (the caller reads RSS then).
//!
//! Registration must be open and the login rate limits raised for one
//! address (`bench/server.sh` starts the servers so).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evi_shared::KeyedId;
use evi_shared::api::{
    AuthResponse, Base64Bytes, LoginRequest, PullResponse, PushRequest, PushResponse,
    RegisterRequest, Segment, WaitResponse,
};
use serde_json::json;

#[path = "load/hostile.rs"]
mod hostile;

const PASSWORD: &str = "load-test-password-0123456789";

/// xorshift64*, as the home generator uses: repeatable and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn keyed_id(&mut self) -> KeyedId {
        let mut b = [0u8; 32];
        for chunk in b.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        KeyedId::from_bytes(b)
    }
}

struct Args {
    mode: String,
    servers: Vec<String>,
    accounts: usize,
    devices: usize,
    rounds: usize,
    concurrency: usize,
    waits: usize,
    sample: usize,
    settle: Duration,
    /// The servers' process ids, for their CPU time over the timed part.
    pids: Vec<u32>,
    /// Whether one account attacks the server during the rounds.
    hostile: bool,
    /// Trickled uploads the hostile account holds open.
    trickle: usize,
}

/// User + system CPU seconds of `pids` so far (Linux `/proc`); 0 for a
/// process that cannot be read.
fn cpu_secs(pids: &[u32]) -> f64 {
    // Clock ticks per second: 100 on every Linux this runs on.
    const TICKS: f64 = 100.0;
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|stat| {
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split(' ').collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / TICKS)
        })
        .sum()
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mode = it
        .next()
        .ok_or("usage: evi-load syncs|waits --servers URL[,URL…] …")?;
    let mut a = Args {
        mode,
        servers: Vec::new(),
        accounts: 1000,
        devices: 3,
        rounds: 5,
        concurrency: 64,
        waits: 10,
        sample: 200,
        settle: Duration::from_secs(5),
        pids: Vec::new(),
        hostile: false,
        trickle: 200,
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--servers" => a.servers = value.split(',').map(str::to_owned).collect(),
            "--accounts" => a.accounts = num()?,
            "--devices" => a.devices = num()?.max(2),
            "--rounds" => a.rounds = num()?,
            "--concurrency" => a.concurrency = num()?.max(1),
            "--waits" => a.waits = num()?.max(1),
            "--sample" => a.sample = num()?,
            "--settle-secs" => a.settle = Duration::from_secs(num()? as u64),
            "--hostile" => a.hostile = num()? > 0,
            "--trickle" => a.trickle = num()?,
            "--pids" => {
                a.pids = value
                    .split(',')
                    .map(|p| p.parse().map_err(|_| format!("--pids: not a pid: {p}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.servers.is_empty() {
        return Err("--servers URL[,URL…] is needed".into());
    }
    Ok(a)
}

#[derive(Clone)]
struct Device {
    server: String,
    token: String,
    cursor: Arc<AtomicU64>,
}

fn url(server: &str, path: &str) -> String {
    format!("{server}/api/v1/{path}")
}

async fn checked<T: serde::de::DeserializeOwned>(
    what: &str,
    r: reqwest::Result<reqwest::Response>,
) -> Result<T, String> {
    let r = r.map_err(|e| format!("{what}: {e}"))?;
    let status = r.status();
    if !status.is_success() {
        let body = r.text().await.unwrap_or_default();
        return Err(format!("{what}: {status}: {body}"));
    }
    r.json().await.map_err(|e| format!("{what}: {e}"))
}

/// Registers `user` on the first server and logs in `devices - 1` more,
/// spread over the servers; the devices, the first one first.
async fn account(
    http: &reqwest::Client,
    servers: &[String],
    user: &str,
    devices: usize,
) -> Result<Vec<Device>, String> {
    let mut out = Vec::with_capacity(devices);
    for d in 0..devices {
        let server = servers[d % servers.len()].clone();
        let auth: AuthResponse = if d == 0 {
            let body = RegisterRequest {
                user: user.to_owned(),
                password: PASSWORD.to_owned(),
                device: format!("dev{d}"),
                invite: None,
            };
            checked(
                "register",
                http.post(url(&server, "register")).json(&body).send().await,
            )
            .await?
        } else {
            let body = LoginRequest {
                user: user.to_owned(),
                password: PASSWORD.to_owned(),
                device: format!("dev{d}"),
            };
            checked(
                "login",
                http.post(url(&server, "login")).json(&body).send().await,
            )
            .await?
        };
        out.push(Device {
            server,
            token: auth.token,
            cursor: Arc::new(AtomicU64::new(0)),
        });
    }
    Ok(out)
}

async fn push(http: &reqwest::Client, dev: &Device, rng: &mut Rng) -> Result<u64, String> {
    let entries = 1 + (rng.next() % 4) as usize;
    let size = 1024 + (rng.next() % 3072) as usize;
    let body = PushRequest {
        segments: vec![Segment {
            stream: rng.keyed_id(),
            kind: "entries".into(),
            entry_ids: (0..entries).map(|_| rng.keyed_id()).collect(),
            ciphertext: Base64Bytes(rng.bytes(size)),
            refs: Vec::new(),
            forgets: Vec::new(),
            forget_blobs: Vec::new(),
            group: None,
        }],
    };
    let resp: PushResponse = checked(
        "push",
        http.post(url(&dev.server, "records"))
            .bearer_auth(&dev.token)
            .json(&body)
            .send()
            .await,
    )
    .await?;
    Ok(resp.newest_seq)
}

/// Pulls everything after the device's cursor; how many records came.
async fn pull(http: &reqwest::Client, dev: &Device) -> Result<usize, String> {
    let mut got = 0;
    loop {
        let after = dev.cursor.load(Ordering::Relaxed);
        let page: PullResponse = checked(
            "pull",
            http.get(url(&dev.server, &format!("records?after={after}")))
                .bearer_auth(&dev.token)
                .send()
                .await,
        )
        .await?;
        got += page.records.len();
        dev.cursor.store(page.next_after, Ordering::Relaxed);
        if !page.more {
            return Ok(got);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `f` over `items` with at most `n` at once; the results in order.
async fn bounded<T, R, F, Fut>(items: Vec<T>, n: usize, f: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = R> + Send + 'static,
{
    let f = Arc::new(f);
    let sem = Arc::new(tokio::sync::Semaphore::new(n));
    let mut tasks = Vec::with_capacity(items.len());
    for item in items {
        let permit = sem.clone().acquire_owned().await.expect("open semaphore");
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let r = f(item).await;
            drop(permit);
            r
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

async fn setup(
    http: &reqwest::Client,
    a: &Args,
    devices: usize,
) -> Result<Vec<Vec<Device>>, String> {
    let run = ulid::Ulid::new().to_string().to_lowercase();
    let servers = a.servers.clone();
    let names: Vec<String> = (0..a.accounts).map(|i| format!("u{i}-{run}")).collect();
    let http = http.clone();
    let made = bounded(names, a.concurrency.min(16), move |name| {
        let http = http.clone();
        let servers = servers.clone();
        async move { account(&http, &servers, &name, devices).await }
    })
    .await;
    made.into_iter().collect()
}

async fn syncs(a: Args) -> Result<serde_json::Value, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency * 2)
        .build()
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let accounts = setup(&http, &a, a.devices).await?;
    eprintln!(
        "set up {} accounts x {} devices in {:.1} s",
        accounts.len(),
        a.devices,
        t.elapsed().as_secs_f64()
    );
    let attack = match a.hostile {
        true => Some(hostile::start(&http, &a.servers[0], a.trickle).await?),
        false => None,
    };
    let mut latencies = Vec::new();
    let cpu0 = cpu_secs(&a.pids);
    let started = Instant::now();
    let seed = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    for round in 0..a.rounds {
        let jobs: Vec<(Vec<Device>, u64)> = accounts
            .iter()
            .map(|devs| (devs.clone(), seed.fetch_add(7919, Ordering::Relaxed)))
            .collect();
        let http = http.clone();
        let results = bounded(jobs, a.concurrency, move |(devs, s)| {
            let http = http.clone();
            async move {
                let mut rng = Rng(s | 1);
                let pusher = round % devs.len();
                let t = Instant::now();
                push(&http, &devs[pusher], &mut rng).await?;
                for (i, d) in devs.iter().enumerate() {
                    if i != pusher {
                        pull(&http, d).await?;
                    }
                }
                // The pusher's cursor moves past its own record too.
                pull(&http, &devs[pusher]).await?;
                Ok::<f64, String>(t.elapsed().as_secs_f64() * 1000.0)
            }
        })
        .await;
        for r in results {
            latencies.push(r?);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = cpu_secs(&a.pids) - cpu0;
    let hostile = match attack {
        Some(h) => h.stop().await,
        None => serde_json::Value::Null,
    };
    // Every device holds every record of its account.
    for devs in &accounts {
        let want = devs[0].cursor.load(Ordering::Relaxed);
        for d in devs {
            let got = d.cursor.load(Ordering::Relaxed);
            if got != want {
                return Err(format!(
                    "a device's cursor is at {got}, another's at {want}"
                ));
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len();
    Ok(json!({
        "mode": "syncs",
        "servers": a.servers.len(),
        "accounts": a.accounts,
        "devices": a.devices,
        "syncs": n,
        "wall_secs": wall,
        "syncs_per_sec": n as f64 / wall,
        "p50_ms": percentile(&latencies, 0.5),
        "p99_ms": percentile(&latencies, 0.99),
        "server_cpu_ms_per_sync": server_cpu * 1000.0 / n.max(1) as f64,
        "hostile": hostile,
    }))
}

async fn waits(a: Args) -> Result<serde_json::Value, String> {
    let total = a.accounts * a.waits;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(total + 64)
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    // Device 0 waits, device 1 pushes.
    let accounts = setup(&http, &a, 2).await?;
    eprintln!(
        "set up {} accounts in {:.1} s",
        accounts.len(),
        t.elapsed().as_secs_f64()
    );
    let servers = a.servers.clone();
    // Account i's waits are all parked on server i mod S; its push goes
    // through the next server, so with two servers every wake-up timed
    // crosses replicas.
    let mut parked: Vec<Vec<tokio::task::JoinHandle<_>>> = Vec::with_capacity(accounts.len());
    for (i, devs) in accounts.iter().enumerate() {
        let server = servers[i % servers.len()].clone();
        let mut mine = Vec::with_capacity(a.waits);
        for _ in 0..a.waits {
            let http = http.clone();
            let server = server.clone();
            let token = devs[0].token.clone();
            mine.push(tokio::spawn(async move {
                let r: Result<WaitResponse, String> = checked(
                    "wait",
                    http.get(url(&server, "records/wait?after=0&timeout=60"))
                        .bearer_auth(&token)
                        .send()
                        .await,
                )
                .await;
                (r, Instant::now())
            }));
        }
        parked.push(mine);
    }
    tokio::time::sleep(a.settle).await;
    if let Some(early) = parked.iter_mut().flatten().position(|h| h.is_finished()) {
        let h = parked.iter_mut().flatten().nth(early).expect("found above");
        let (r, _) = h.await.map_err(|e| e.to_string())?;
        return Err(format!("wait {early} answered before any push: {r:?}"));
    }
    eprintln!("parked {total}");
    tokio::time::sleep(a.settle).await;
    let mut wakes = Vec::new();
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for (i, (devs, mine)) in accounts.iter().zip(parked).enumerate() {
        if i >= a.sample {
            for h in mine {
                h.abort();
            }
            continue;
        }
        let mut dev = devs[1].clone();
        dev.server = servers[(i + 1) % servers.len()].clone();
        // Timed from the push's request: the wake-up includes the push's
        // own commit (a wait may answer before the push's answer is read).
        let pushed = Instant::now();
        push(&http, &dev, &mut rng).await?;
        for h in mine {
            let (r, at) = h.await.map_err(|e| e.to_string())?;
            if r?.pending == 0 {
                return Err("a wait timed out instead of waking".into());
            }
            wakes.push(at.saturating_duration_since(pushed).as_secs_f64() * 1000.0);
        }
    }
    wakes.sort_by(f64::total_cmp);
    Ok(json!({
        "mode": "waits",
        "servers": a.servers.len(),
        "waits": total,
        "sampled": wakes.len(),
        "wake_p50_ms": percentile(&wakes, 0.5),
        "wake_p99_ms": percentile(&wakes, 0.99),
    }))
}

fn main() -> ExitCode {
    // reqwest is built without a TLS provider of its own (see the client's
    // Cargo.toml): ring, as the server and `evi` install it.
    evi_server::storage::install_tls_provider();
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async move {
        match a.mode.as_str() {
            "syncs" => syncs(a).await,
            "waits" => waits(a).await,
            other => Err(format!("unknown mode {other}: syncs or waits")),
        }
    });
    match out {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
