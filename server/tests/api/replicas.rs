//! Several `evi-server` processes on one Postgres database: migrations
//! that race, a schema newer than the binary, seqs that commit out of
//! order on two replicas, a wait on one woken by a commit on the other,
//! and login failures counted across replicas.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{Api, PASSWORD, TestDb, TestServer, listening_on, pg_exec, raw_http, segment};

/// Runs the binary on `db` with a data folder of its own until it ends;
/// its exit code and stderr.
fn run_to_end(db: &str, data: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--registration",
            "open",
            "--data",
        ])
        .arg(data)
        .args(["--database", db])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
fn two_servers_started_at_once_on_a_fresh_database_migrate_it_once() {
    let db = TestDb::create();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    // Both spawned before either reads its first line: they start together.
    let mut children: Vec<_> = dirs
        .iter()
        .map(|d| {
            Command::new(env!("CARGO_BIN_EXE_evi-server"))
                .args([
                    "--listen",
                    "127.0.0.1:0",
                    "--registration",
                    "open",
                    "--data",
                ])
                .arg(d.path())
                .args(["--database", &db.url])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let addrs: Vec<String> = children.iter_mut().map(listening_on).collect();
    let rows = pg_exec(
        &db.url,
        "SELECT version FROM evi_schema_migrations ORDER BY version",
    );
    assert_eq!(
        rows,
        (1..=crate::operator::postgres_migrations().len())
            .map(|v| vec![Some(v.to_string())])
            .collect::<Vec<_>>(),
        "each version applied once"
    );
    for addr in &addrs {
        let reply = raw_http(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            true,
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
fn a_database_migrated_by_a_newer_server_is_refused_at_start() {
    let mut srv = TestServer::start(&[]);
    srv.stop();
    let db = srv.db.as_ref().unwrap().url.clone();
    pg_exec(
        &db,
        "INSERT INTO evi_schema_migrations (version, name, applied_at) VALUES (42, 'future', 0)",
    );
    let data = tempfile::tempdir().unwrap();
    let (code, err) = run_to_end(&db, data.path());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "was migrated by a newer evi-server (version 42; this one knows up to {}); upgrade this one",
            crate::operator::postgres_migrations().len()
        )),
        "{err}"
    );
}

#[test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
fn a_bad_or_unreachable_database_is_named_without_its_password() {
    let data = tempfile::tempdir().unwrap();
    let (code, err) = run_to_end("mysql://u:pw@127.0.0.1/x", data.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("postgres://"), "{err}");
    // Port 1: nothing listens there.
    let (code, err) = run_to_end("postgres://evi:s3cretpw@127.0.0.1:1/evi", data.path());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot reach the database at 127.0.0.1:1/evi"),
        "{err}"
    );
    assert!(err.contains("check that Postgres runs there"), "{err}");
    assert!(!err.contains("s3cretpw"), "the password leaked: {err}");
}

/// A second device of `user`'s account, logged in through `via`.
async fn login(via: &Api, user: &str, device: &str) -> Api {
    let (st, v) = via
        .post(
            "/api/v1/login",
            json!({"user": user, "password": PASSWORD, "device": device}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    via.with_token(v["token"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn concurrent_pushes_on_two_replicas_never_make_a_puller_skip_a_seq() {
    const WRITERS: u64 = 8;
    const PUSHES: u64 = 30;
    let a = TestServer::start(&[]);
    let b = a.replica();
    let on_a = a.register("many").await;
    let on_b = b.rebase(&on_a);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let api = if w.is_multiple_of(2) {
            on_a.clone()
        } else {
            on_b.clone()
        };
        writers.push(tokio::spawn(async move {
            for p in 0..PUSHES {
                api.push(vec![segment(w, w * 1000 + p, 64)]).await;
            }
        }));
    }
    // The puller follows its cursor on both replicas in turn while the
    // writers run, as a device behind a proxy would.
    let puller = {
        let (pa, pb) = (on_a.clone(), on_b.clone());
        tokio::spawn(async move {
            let mut after = 0u64;
            let mut seen = Vec::new();
            let mut turn = 0u64;
            while seen.len() < (WRITERS * PUSHES) as usize {
                let api = if turn.is_multiple_of(2) { &pa } else { &pb };
                turn += 1;
                let (st, v) = api
                    .get(&format!("/api/v1/records?after={after}&limit=7"))
                    .await;
                assert_eq!(st, StatusCode::OK, "{v}");
                for r in v["records"].as_array().unwrap() {
                    seen.push(r["seq"].as_u64().unwrap());
                }
                after = v["next_after"].as_u64().unwrap();
                assert!(turn < 100_000, "the puller never saw every record");
            }
            seen
        })
    };
    for w in writers {
        w.await.unwrap();
    }
    let seen = tokio::time::timeout(Duration::from_secs(60), puller)
        .await
        .expect("the puller finished")
        .unwrap();
    let expected: Vec<u64> = (1..=WRITERS * PUSHES).collect();
    assert_eq!(seen, expected, "every seq once, in order, none skipped");
    let distinct: BTreeSet<_> = seen.iter().collect();
    assert_eq!(distinct.len(), (WRITERS * PUSHES) as usize);
}

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_wait_on_one_replica_wakes_within_a_second_of_a_commit_on_the_other() {
    let a = TestServer::start(&[]);
    let b = a.replica();
    let pusher = a.register("waker").await;
    let waiter = b.rebase(&login(&pusher, "waker", "watcher").await);
    let parked = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let r = waiter.get("/api/v1/records/wait?after=0&timeout=30").await;
            (r, Instant::now())
        })
    };
    // Long enough for the wait to park on B.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!parked.is_finished(), "the wait answered before any commit");
    pusher.push(vec![segment(1, 1, 10)]).await;
    let pushed = Instant::now();
    let ((st, v), answered) = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("the wait on the other replica answered")
        .unwrap();
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 1})));
    let late = answered.saturating_duration_since(pushed);
    assert!(
        late < Duration::from_secs(1),
        "woken {late:?} after the commit"
    );
}

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_device_revoked_through_one_replica_has_its_wait_on_the_other_ended() {
    let a = TestServer::start(&[]);
    let b = a.replica();
    let owner = a.register("revoker").await;
    let (st, v) = owner
        .post(
            "/api/v1/login",
            json!({"user": "revoker", "password": PASSWORD, "device": "lost"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let lost_id = v["device_id"].as_str().unwrap().to_owned();
    let lost = b.rebase(&owner.with_token(v["token"].as_str().unwrap()));
    let parked = tokio::spawn(async move {
        let r = lost.get("/api/v1/records/wait?after=0&timeout=30").await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (st, _) = owner
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/devices/{lost_id}"),
            None,
        )
        .await;
    assert!(st.is_success(), "{st}");
    let revoked = Instant::now();
    let ((st, _), answered) = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("the revoked wait ended")
        .unwrap();
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert!(answered.saturating_duration_since(revoked) < Duration::from_secs(1));
}

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_guesser_spreading_over_two_replicas_is_held_to_one_limit() {
    // Three failures a minute per user and address; without a shared count
    // each replica would allow three.
    let a = TestServer::start(&["--auth-rate-per-user", "3"]);
    let b = a.replica();
    a.register("target").await;
    let apis = [a.anon(), b.anon()];
    let guess = json!({"user": "target", "password": "wrong guess 123", "device": "x"});
    let mut refused_at = None;
    for n in 0..6 {
        let (st, v) = apis[n % 2].post("/api/v1/login", guess.clone()).await;
        match st {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => {
                refused_at = Some(n);
                break;
            }
            other => panic!("{other}: {v}"),
        }
    }
    assert_eq!(
        refused_at,
        Some(3),
        "the fourth guess, on either replica, is refused"
    );
    // The other replica refuses too.
    let (st, _) = apis[0].post("/api/v1/login", guess.clone()).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    let (st, _) = apis[1].post("/api/v1/login", guess).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_commit_while_the_listener_is_cut_off_still_answers_the_wait() {
    let a = TestServer::start(&[]);
    let b = a.replica();
    let pusher = a.register("cutoff").await;
    let waiter = b.rebase(&login(&pusher, "cutoff", "watcher").await);
    let parked = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.get("/api/v1/records/wait?after=0&timeout=30").await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The database takes no new connection, and drops both replicas'
    // LISTEN connections: they cannot come back until it takes them again.
    let admin = crate::common::postgres_url();
    let name = a.db.as_ref().unwrap().name().to_owned();
    pg_exec(
        &admin,
        &format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"),
    );
    let listeners = format!(
        "SELECT pid FROM pg_stat_activity WHERE datname = '{name}' AND query LIKE 'LISTEN%'"
    );
    let cut = pg_exec(
        &admin,
        &format!("SELECT pg_terminate_backend(pid) FROM ({listeners}) l"),
    );
    assert_eq!(cut.len(), 2, "one listener per replica");
    for _ in 0..100 {
        if pg_exec(&admin, &listeners).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        pg_exec(&admin, &listeners).is_empty(),
        "the listeners are gone"
    );
    // A commit through a connection A already holds: its notice reaches
    // no listener, and the wait stays parked.
    pusher.push(vec![segment(1, 1, 10)]).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!parked.is_finished(), "answered with no listener up");
    // Once the listener is back it wakes every wait, and this one finds
    // the record: late, not lost.
    pg_exec(
        &admin,
        &format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"),
    );
    let (st, v) = tokio::time::timeout(Duration::from_secs(15), parked)
        .await
        .expect("the wait answered once the listener was back")
        .unwrap();
    assert_eq!((st, v), (StatusCode::OK, json!({"pending": 1})));
}

/// Opens a rotation of `api`'s account (with nothing to carry) and commits
/// it, revoking `revoke`: what `evi sync key rotate` does on the server.
async fn rotate(api: &Api, revoke: &[&str]) {
    let (st, v) = api.post("/api/v1/rotation", json!({})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let staging = api.with_token(v["token"].as_str().unwrap());
    let (st, v) = staging
        .call(
            reqwest::Method::PUT,
            "/api/v1/key-check",
            Some(json!({"key_check": "a2V5IGNoZWNr"})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = api
        .post(
            "/api/v1/rotation/commit",
            json!({"through_seq": 0, "revoke": revoke}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

#[tokio::test]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_rotation_through_one_replica_ends_the_waits_parked_on_the_other_at_once() {
    let a = TestServer::start(&[]);
    let (b, metrics) = a.replica_with_metrics(&[]);
    let rotating = a.register("rotor").await;
    let desktop = b.rebase(&login(&rotating, "rotor", "desktop").await);
    let (st, v) = rotating
        .post(
            "/api/v1/login",
            json!({"user": "rotor", "password": PASSWORD, "device": "stolen"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let stolen_id = v["device_id"].as_str().unwrap().to_owned();
    let stolen = b.rebase(&rotating.with_token(v["token"].as_str().unwrap()));
    let park = |api: &Api| {
        let api = api.clone();
        tokio::spawn(async move {
            let r = api.get("/api/v1/records/wait?after=0&timeout=30").await;
            (r, Instant::now())
        })
    };
    let (desktop_wait, stolen_wait) = (park(&desktop), park(&stolen));
    crate::wait::parked(&metrics, 2.0).await;
    rotate(&rotating, &[&stolen_id]).await;
    let committed = Instant::now();
    let ended = |w: tokio::task::JoinHandle<((StatusCode, serde_json::Value), Instant)>| async move {
        let (r, at) = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("the rotation ended the wait on the other replica")
            .unwrap();
        assert!(
            at.saturating_duration_since(committed) < Duration::from_secs(1),
            "ended {:?} after the commit",
            at.saturating_duration_since(committed)
        );
        r
    };
    // The desktop holds the old key: told so at once, as its next call is.
    let (st, v) = ended(desktop_wait).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("key_rotated")),
        "{v}"
    );
    // The stolen laptop was revoked by the commit: 401, nothing more.
    let (st, v) = ended(stolen_wait).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized")),
        "{v}"
    );
}

/// A record of `stream` that forgets it (the server reads only its kind).
fn forget_record(stream: u64, entry: u64) -> serde_json::Value {
    let mut r = segment(stream, entry, 64);
    r["kind"] = json!("forget");
    r
}

/// Every body pack file of the shared store, with its bytes.
fn pack_bytes(srv: &TestServer) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    srv.packs()
        .into_iter()
        .filter_map(|p| Some((p.clone(), std::fs::read(p).ok()?)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on Postgres only: again_on_postgres runs it"]
async fn a_pull_on_one_replica_is_answered_whole_while_the_other_compacts_its_pack() {
    // Replica C compacts; replica R holds every pull between reading where
    // its bodies are and reading them (3 s). Packs replaced by a compaction
    // stay 8 s after the records moved off them.
    let grace = [("EVI_SERVER_COMPACTION_GRACE_SECS", "8")];
    let c = TestServer::start_env(&[], &grace);
    let (r, _) = c.replica_with_metrics(&[("EVI_SERVER_FAULT", "slow-pull-bodies")]);
    let writer = c.register("racer").await;
    let reader = r.rebase(&login(&writer, "racer", "reader").await);
    // One push, one pack: a session to forget (stream 1) and one to keep.
    let mut pushed = vec![segment(1, 1, 3000)];
    pushed.extend((2..=6).map(|e| segment(2, e, 3000)));
    writer.push(pushed.clone()).await;
    let gone_body = pushed[0]["ciphertext"].clone();
    let before = pack_bytes(&c);
    assert_eq!(before.len(), 1, "one pack");

    let pull = tokio::spawn(async move { reader.get("/api/v1/records?after=0").await });
    // R has read where the bodies are, and holds the pull.
    let holding = "slow-pull-bodies: holding a pull";
    let t = Instant::now();
    while !c.log().contains(holding) {
        assert!(t.elapsed() < Duration::from_secs(20), "{}", c.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // C commits the forget; its compaction copies the kept bodies to a new
    // pack and points the records there while R's pull is held.
    writer.push(vec![forget_record(1, 7)]).await;
    let t = Instant::now();
    while pack_bytes(&c).len() < 2 && pack_bytes(&c).iter().all(|(p, _)| *p == before[0].0) {
        assert!(t.elapsed() < Duration::from_secs(3), "no compaction");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // R's pull reads the bodies where it was told they are: whole, and
    // exactly what was pushed.
    let (st, v) = tokio::time::timeout(Duration::from_secs(20), pull)
        .await
        .expect("the pull answered")
        .unwrap();
    assert_eq!(st, StatusCode::OK, "the pull during the compaction: {v}");
    let got: Vec<(String, serde_json::Value)> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["stream"].as_str().unwrap().to_owned(),
                r["ciphertext"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, serde_json::Value)> = pushed
        .iter()
        .map(|r| {
            (
                r["stream"].as_str().unwrap().to_owned(),
                r["ciphertext"].clone(),
            )
        })
        .collect();
    assert_eq!(got, want);

    // After the grace the old pack goes: no byte of the forgotten body is
    // stored, and a pull on either replica reads the kept ones whole.
    let gone = {
        use base64::Engine as _;
        let b = base64::engine::general_purpose::STANDARD
            .decode(gone_body.as_str().unwrap())
            .unwrap();
        b[..64].to_vec()
    };
    let t = Instant::now();
    while pack_bytes(&c)
        .iter()
        .any(|(_, b)| b.windows(gone.len()).any(|w| w == gone.as_slice()))
    {
        assert!(t.elapsed() < Duration::from_secs(30), "the old pack stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for api in [&writer, &r.rebase(&writer)] {
        let (st, v) = api.get("/api/v1/records?after=0").await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let kept: Vec<serde_json::Value> = v["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "entries")
            .map(|r| r["ciphertext"].clone())
            .collect();
        let want: Vec<serde_json::Value> = pushed[1..]
            .iter()
            .map(|r| r["ciphertext"].clone())
            .collect();
        assert_eq!(kept, want);
    }
}
