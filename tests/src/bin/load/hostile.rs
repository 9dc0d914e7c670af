//! One hostile account attacking the server while the others sync, as
//! issue 46's findings 1-4 did, each at full speed in a task of its own:
//!
//! 1. damage reports of 1,000 seqs against the account's 20,000 entries,
//!    one after another (before the index on `(user_id, seq)`, each scanned
//!    every entry of the account inside the write transaction);
//! 2. pairing slots opened, joined and asked for a device, again and again
//!    (before, one slot minted devices without end);
//! 3. uploads under the account's token that send a byte every 10 s, each
//!    on a connection of its own (before, a token lifted every deadline and
//!    nothing bounded how many an account held);
//! 4. pairing long polls parked on its slot, as many as it is let (before,
//!    none was counted).
//!
//! What each got back is counted by status, so the report shows the server
//! refusing what passes an account's share.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evi_shared::api::{AuthResponse, Base64Bytes, PushRequest, RegisterRequest, Segment};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{PASSWORD, Rng, checked, url};

/// Entries the hostile account stores before the attack (in 200 segments).
const ENTRIES: usize = 20_000;
/// Seqs in one damage report.
const REPORT_SEQS: u64 = 1_000;

/// Answers by status, per attack.
type Tally = Arc<Mutex<BTreeMap<&'static str, BTreeMap<u16, u64>>>>;

pub struct Attack {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    tally: Tally,
}

fn count(tally: &Tally, attack: &'static str, status: u16) {
    let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
    *t.entry(attack).or_default().entry(status).or_default() += 1;
}

/// Registers the hostile account on `server`, stores its entries, and
/// starts the four attacks.
pub async fn start(http: &reqwest::Client, server: &str, trickle: usize) -> Result<Attack, String> {
    let user = format!("mallory-{}", ulid::Ulid::new().to_string().to_lowercase());
    let auth: AuthResponse = checked(
        "register the hostile account",
        http.post(url(server, "register"))
            .json(&RegisterRequest {
                user,
                password: PASSWORD.to_owned(),
                device: "mallory".into(),
                invite: None,
            })
            .send()
            .await,
    )
    .await?;
    let token = auth.token;
    let mut rng = Rng(0xBAD5_EED5);
    for _ in 0..ENTRIES / 100 {
        let body = PushRequest {
            segments: vec![Segment {
                stream: rng.keyed_id(),
                kind: "entries".into(),
                entry_ids: (0..100).map(|_| rng.keyed_id()).collect(),
                ciphertext: Base64Bytes(rng.bytes(256)),
                refs: Vec::new(),
                forgets: Vec::new(),
                forget_blobs: Vec::new(),
                group: None,
            }],
        };
        let _: Value = checked(
            "the hostile account's push",
            http.post(url(server, "records"))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await,
        )
        .await?;
    }
    let (stop, stopped) = watch::channel(false);
    let tally: Tally = Arc::default();
    let mut tasks = JoinSet::new();
    tasks.spawn(damage_reports(
        http.clone(),
        server.to_owned(),
        token.clone(),
        stopped.clone(),
        tally.clone(),
    ));
    tasks.spawn(pairings(
        http.clone(),
        server.to_owned(),
        token.clone(),
        stopped.clone(),
        tally.clone(),
    ));
    let addr = server
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    for i in 0..trickle {
        tasks.spawn(trickled_upload(
            addr.clone(),
            token.clone(),
            i,
            stopped.clone(),
            tally.clone(),
        ));
    }
    tasks.spawn(pairing_waits(
        http.clone(),
        server.to_owned(),
        token,
        stopped,
        tally.clone(),
    ));
    Ok(Attack { stop, tasks, tally })
}

impl Attack {
    /// Ends every attack; what each got back.
    pub async fn stop(mut self) -> Value {
        self.stop.send_replace(true);
        while self.tasks.join_next().await.is_some() {}
        let t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        let by_attack: serde_json::Map<String, Value> = t
            .iter()
            .map(|(attack, statuses)| {
                let s: serde_json::Map<String, Value> = statuses
                    .iter()
                    .map(|(st, n)| (st.to_string(), json!(n)))
                    .collect();
                ((*attack).to_owned(), Value::Object(s))
            })
            .collect();
        Value::Object(by_attack)
    }
}

async fn damage_reports(
    http: reqwest::Client,
    server: String,
    token: String,
    stopped: watch::Receiver<bool>,
    tally: Tally,
) {
    let mut first = 1;
    while !*stopped.borrow() {
        let seqs: Vec<u64> = (first..first + REPORT_SEQS).collect();
        first = first % (ENTRIES as u64 / 100) + 1;
        let st = http
            .post(url(&server, "records/damaged"))
            .bearer_auth(&token)
            .json(&json!({ "seqs": seqs }))
            .send()
            .await
            .map_or(0, |r| r.status().as_u16());
        count(&tally, "damage_reports", st);
    }
}

async fn pairings(
    http: reqwest::Client,
    server: String,
    token: String,
    stopped: watch::Receiver<bool>,
    tally: Tally,
) {
    while !*stopped.borrow() {
        let opened = http
            .post(url(&server, "pair"))
            .bearer_auth(&token)
            .json(&json!({ "offer": "AQ==" }))
            .send()
            .await;
        let slot = match opened {
            Ok(r) if r.status().is_success() => {
                count(&tally, "pairing_open", 200);
                r.json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["slot"].as_u64())
            }
            Ok(r) => {
                count(&tally, "pairing_open", r.status().as_u16());
                None
            }
            Err(_) => {
                count(&tally, "pairing_open", 0);
                None
            }
        };
        let Some(slot) = slot else {
            // Refused (the account's pairing rate): as a client that
            // retries at once would, with a breath for the load process.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let _ = http
            .post(url(&server, &format!("pair/{slot}/join")))
            .json(&json!({ "hello": "Ag==" }))
            .send()
            .await;
        for _ in 0..50 {
            let st = http
                .post(url(&server, &format!("pair/{slot}/device")))
                .bearer_auth(&token)
                .json(&json!({ "device": "minted" }))
                .send()
                .await
                .map_or(0, |r| r.status().as_u16());
            count(&tally, "pairing_devices", st);
        }
    }
}

async fn trickled_upload(
    addr: String,
    token: String,
    i: usize,
    mut stopped: watch::Receiver<bool>,
    tally: Tally,
) {
    let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
        count(&tally, "trickled_uploads", 0);
        return;
    };
    let name = format!("{:064x}", 0xa11c_e000_u64 + i as u64);
    let head = format!(
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
    );
    if s.write_all(head.as_bytes()).await.is_err() {
        count(&tally, "trickled_uploads", 0);
        return;
    }
    let mut sent = 0u64;
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
        if s.write_all(b"x").await.is_err() {
            break;
        }
        sent += 1;
    }
    // What the server did with it: answered early (429) and closed, or
    // still reading when the attack ended.
    let mut buf = [0u8; 64];
    let answer = tokio::time::timeout(Duration::from_millis(200), async {
        use tokio::io::AsyncReadExt as _;
        s.read(&mut buf).await
    })
    .await;
    let status = match answer {
        Ok(Ok(n)) if n >= 12 => std::str::from_utf8(&buf[9..12])
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(1),
        _ => 1,
    };
    let _ = sent;
    // 1: held open to the end without an answer.
    count(&tally, "trickled_uploads", status);
}

async fn pairing_waits(
    http: reqwest::Client,
    server: String,
    token: String,
    stopped: watch::Receiver<bool>,
    tally: Tally,
) {
    // A slot of its own to wait on (the pairing task may hold the rate).
    let slot = loop {
        if *stopped.borrow() {
            return;
        }
        let r = http
            .post(url(&server, "pair"))
            .bearer_auth(&token)
            .json(&json!({ "offer": "AQ==" }))
            .send()
            .await;
        if let Ok(r) = r
            && r.status().is_success()
            && let Some(slot) = r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["slot"].as_u64())
        {
            break slot;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut parked = JoinSet::new();
    while !*stopped.borrow() {
        while parked.len() < 500 {
            let (http, server, token, tally) =
                (http.clone(), server.clone(), token.clone(), tally.clone());
            parked.spawn(async move {
                let st = http
                    .get(url(
                        &server,
                        &format!("pair/{slot}/wait?state=open&timeout=20"),
                    ))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16());
                count(&tally, "pairing_waits", st);
            });
        }
        tokio::select! {
            _ = parked.join_next() => {}
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    parked.abort_all();
}
