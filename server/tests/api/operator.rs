//! What an operator sees in the first hour: the start-up log, `evi-server
//! invite`, a taken or named `--listen` address, and the answer a user gets
//! from an invite-only server without a code.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{PASSWORD, TestServer};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The binary with no `EVI_SERVER_*` setting from the environment.
fn server_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evi-server"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("EVI_SERVER_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Runs the binary to its end: (stdout, stderr, exit code).
fn run(args: &[&str], data: &Path) -> (String, String, i32) {
    let out = server_cmd()
        .args(args)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

/// [`run`] on `srv`'s data folder and, on Postgres, its database (as the
/// operator passes both to `invite`).
fn run_on(args: &[&str], srv: &TestServer) -> (String, String, i32) {
    let mut all = args.to_vec();
    if let Some(db) = &srv.db {
        all.extend(["--database", db.url.as_str()]);
    }
    run(&all, &srv.data())
}

/// `server_cmd()` for `invite` on `srv`'s data folder and database.
fn invite_cmd(srv: &TestServer) -> Command {
    let mut cmd = server_cmd();
    cmd.args(["invite", "--data"]).arg(srv.data());
    if let Some(db) = &srv.db {
        cmd.args(["--database", &db.url]);
    }
    cmd
}

/// The server's log lines without their timestamps, once it has answered a
/// request (so everything it logs before serving is written), from its
/// `starting` line on. On Postgres the two lines before it are checked
/// here: the migration run and the database used, named without its
/// password.
async fn start_lines(srv: &TestServer) -> Vec<String> {
    let (st, _) = srv.anon().get("/healthz").await;
    assert_eq!(st, StatusCode::OK);
    let mut lines: Vec<String> = srv
        .log()
        .lines()
        .map(|l| {
            l.split_once(' ')
                .map_or(l, |(_, rest)| rest)
                .trim_start()
                .to_owned()
        })
        .collect();
    if let Some(db) = &srv.db {
        // One line per migration the server knows, oldest first, then the store.
        let known = postgres_migrations();
        let before: Vec<String> = lines.drain(..known.len() + 1).collect();
        for (i, name) in known.iter().enumerate() {
            assert_eq!(
                before[i],
                format!(
                    "INFO evi_server::store::postgres::migrate: applied database migration \
                     version={} name=\"{name}\"",
                    i + 1
                ),
                "{before:#?}"
            );
        }
        let used = before[known.len()]
            .strip_prefix("INFO evi_server: using Postgres database=")
            .and_then(|rest| rest.strip_suffix(&format!("/{} pool_size=10", db.name())));
        assert!(used.is_some_and(|host| !host.contains('@')), "{before:#?}");
    }
    lines
}

#[tokio::test]
async fn start_logs_version_data_folder_registration_and_limits() {
    let srv = TestServer::start(&["--registration", "invite", "--quota-bytes", "1000000"]);
    let lines = start_lines(&srv).await;
    assert_eq!(
        lines[0],
        format!(
            "INFO evi_server: starting evi-server version={VERSION} data={} registration=invite \
             max_batch_bytes=8388608 max_blob_bytes=67108864 max_page_records=1000 \
             max_page_bytes=4194304 quota_bytes=1000000 auth_rate_per_ip=60 \
             auth_rate_per_user=10 auth_rate_per_user_total=100 trust_forwarded_for=false \
             public_url=none store={} header_timeout_secs=30 body_timeout_secs=60 idle_timeout_secs=60 \
             request_timeout_secs=30 max_connections=8192 max_connections_per_ip=64 \
             max_header_bytes=65536 max_waiters=4096 max_wait_secs=60 pair_ttl_secs=600 pair_rate=10",
            srv.data().display(),
            srv.store_label()
        ),
        "{lines:#?}"
    );
    assert!(lines.iter().all(|l| !l.starts_with("WARN")), "{lines:#?}");
}

#[tokio::test]
async fn open_registration_logs_a_warning() {
    let srv = TestServer::start(&["--registration", "open"]);
    let lines = start_lines(&srv).await;
    assert!(
        lines[0].starts_with("INFO evi_server: starting evi-server version=")
            && lines[0].contains(" registration=open "),
        "{lines:#?}"
    );
    assert_eq!(
        lines[1],
        "WARN evi_server: registration is open: anyone who can reach this server may create an \
         account; use --registration invite (codes from `evi-server invite`) unless only you can \
         reach it"
    );
}

#[tokio::test]
async fn invite_prints_the_code_alone_on_stdout_and_the_folder_on_stderr() {
    let srv = TestServer::start(&["--registration", "invite"]);
    let (out, err, code) = run_on(&["invite"], &srv);
    assert_eq!(code, 0, "{err}");
    let invite = out.strip_suffix('\n').unwrap();
    assert!(
        invite.len() == 32 && invite.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out:?}"
    );
    // No note: the server's database says invite. Until when the code
    // works: seven days from now, to the minute.
    let prefix = format!(
        "one-time invite code for the evi-server on {}, works until ",
        srv.data().display()
    );
    let until = err
        .strip_prefix(&prefix)
        .and_then(|r| {
            r.strip_suffix(" UTC (the new user passes it to `evi sync init --invite CODE`):\n")
        })
        .unwrap_or_else(|| panic!("{err:?}"));
    let until = chrono::NaiveDateTime::parse_from_str(until, "%Y-%m-%d %H:%M")
        .unwrap()
        .and_utc();
    let week = chrono::Utc::now() + chrono::Duration::days(7);
    assert!(
        (week - until).num_seconds().abs() <= 120,
        "{until} vs {week}"
    );
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/register",
            json!({"user": "bob", "password": PASSWORD, "device": "d", "invite": invite}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

/// `invite` reads the mode from the server's database (set by its
/// `--registration`, whatever the environment `invite` runs in says), and
/// says when its code is not needed.
#[tokio::test]
async fn invite_on_an_open_server_says_nobody_needs_the_code() {
    let srv = TestServer::start(&["--registration", "open"]);
    let out = invite_cmd(&srv)
        .env("EVI_SERVER_REGISTRATION", "invite")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim().len(), 32);
    assert!(
        err.starts_with(
            "note: registration is open: anyone who reaches the server can register without a \
             code, so nobody needs this one; it counts once registration is invite \
             (`evi-server admin registration invite`, or --registration invite)\n"
        ),
        "{err}"
    );
}

#[test]
fn invite_refuses_a_folder_without_a_database() {
    let root = tempfile::tempdir().unwrap();
    let typo = root.path().join("evi-dta");
    let (out, err, code) = run(&["invite"], &typo);
    assert_eq!((out.as_str(), code), ("", 1), "{err}");
    assert_eq!(
        err,
        format!(
            "evi-server: no evi-server database in {0} (no evi-server.sqlite3 there)\n\
             hint: pass the folder the server runs on (--data DIR or EVI_SERVER_DATA), or start \
             the server there first: evi-server --data {0}\n",
            typo.display()
        )
    );
    assert!(!typo.exists(), "nothing is created");

    // A folder that exists but never held a server: the same, and still empty.
    std::fs::create_dir(&typo).unwrap();
    let (_, err2, code) = run(&["invite"], &typo);
    assert_eq!((err2, code), (err, 1));
    assert_eq!(std::fs::read_dir(&typo).unwrap().count(), 0);
}

#[tokio::test]
async fn invite_refuses_closed_registration() {
    let srv = TestServer::start(&["--registration", "closed"]);
    let want = "evi-server: registration is closed: this server accepts no new accounts, with or \
                without a code\n\
                hint: to admit users with codes: `evi-server admin registration invite` (or \
                restart the server with --registration invite)\n";
    // The mode is the database's: a flag in front of the subcommand or the
    // variable in its environment change nothing (`invite` itself takes
    // no such flag).
    let (out, err, code) = run_on(&["--registration", "invite", "invite"], &srv);
    assert_eq!((out.as_str(), err.as_str(), code), ("", want, 2));
    let out = invite_cmd(&srv)
        .env("EVI_SERVER_REGISTRATION", "open")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), want);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn address_in_use_names_the_address() {
    let srv = TestServer::start(&[]);
    let root = tempfile::tempdir().unwrap();
    let (out, err, code) = run(&["--listen", &srv.addr], &root.path().join("data"));
    assert_eq!((out.as_str(), code), ("", 1), "{err}");
    assert_eq!(
        err,
        format!(
            "evi-server: cannot listen on {}: address already in use\n\
             hint: another evi-server or another program is listening there: stop it, or choose \
             another address with --listen (port 0 picks a free one)\n",
            srv.addr
        )
    );
}

#[test]
fn listen_without_a_port_is_a_usage_error() {
    let root = tempfile::tempdir().unwrap();
    let (out, err, code) = run(&["--listen", "localhost"], &root.path().join("data"));
    assert_eq!(
        (out.as_str(), err.as_str(), code),
        (
            "",
            "evi-server: --listen localhost: expected HOST:PORT, for example 127.0.0.1:8787\n",
            2
        )
    );
}

#[test]
fn a_public_url_without_http_is_a_usage_error() {
    let root = tempfile::tempdir().unwrap();
    let (out, err, code) = run(
        &["--public-url", "sync.example.org"],
        &root.path().join("data"),
    );
    assert_eq!(
        (out.as_str(), err.as_str(), code),
        (
            "",
            "evi-server: --public-url \"sync.example.org\" needs http:// or https://\n\
             hint: for example --public-url https://sync.example.org\n",
            2
        )
    );
}

#[tokio::test]
async fn listen_resolves_host_names() {
    let root = tempfile::tempdir().unwrap();
    let mut child = server_cmd()
        .args(["--listen", "localhost:0", "--data"])
        .arg(root.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .parse()
        .unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let resp = crate::common::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn invite_mode_without_a_code_says_how_the_operator_makes_one() {
    let srv = TestServer::start(&["--registration", "invite"]);
    let (st, v) = srv
        .anon()
        .post(
            "/api/v1/register",
            json!({"user": "bob", "password": PASSWORD, "device": "d"}),
        )
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert_eq!(
        v,
        json!({
            "code": "invalid_invite",
            "message": "this server registers new accounts only with an invite code: its \
                        operator makes one on the server machine with `evi-server invite --data \
                        DIR` (DIR: the server's data folder)"
        })
    );
}

/// The names of the Postgres migrations shipped in server/migrations/postgres,
/// in version order (`0002_pair_slots.sql` → `pair_slots`).
pub fn postgres_migrations() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|n| {
            let stem = n.trim_end_matches(".sql");
            stem.split_once('_')
                .map_or(stem, |(_, name)| name)
                .to_owned()
        })
        .collect()
}
