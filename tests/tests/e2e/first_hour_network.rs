//! The first hour, on the wire: what `evi` says about a wrong password, a
//! server it cannot reach, a URL without a scheme or with a path, a rate
//! limit, and a lock another sync holds (issue 9). Each test asserts the
//! lines the user reads and the exit code.
//!
//! After a failed request `init` and `login` may add hints of their own
//! (what was or was not written on this device), so their output is checked
//! from the start; the other commands' output is checked whole.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Device, Run, TestServer};

/// `evi sync init` of `pat` on `server`, with the test password.
fn init(dev: &Device, server: &str) -> Run {
    dev.sync(&["sync", "init", "--server", server, "--user", "pat"])
}

/// `evi sync login` of `pat` on `server` with `password`, the identity of
/// `first` copied in (as `key import` would leave it).
fn login(dev: &Device, first: &Device, server: &str, password: &str) -> Run {
    std::fs::create_dir_all(dev.identity_path().parent().unwrap()).unwrap();
    std::fs::copy(first.identity_path(), dev.identity_path()).unwrap();
    dev.sync_cmd()
        .env("EVI_SYNC_PASSWORD", password)
        .args(["sync", "login", "--server", server, "--user", "pat"])
        .args(["--device", "desktop"])
        .output()
        .unwrap()
        .into()
}

fn assert_starts(run: &Run, code: i32, expected: &str) {
    assert_eq!(run.code, code, "{run:?}");
    assert!(
        run.stderr.starts_with(expected),
        "stderr:\n{}\nexpected it to start with:\n{expected}",
        run.stderr
    );
    assert_eq!(run.stdout, "", "nothing on stdout");
}

/// A loopback port nothing listens on.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A one-thread HTTP server answering each connection with the next of
/// `answers` (status line, extra headers, body), the last one for ever.
fn fake_server(answers: Vec<(&'static str, &'static str, &'static str)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut i = 0;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (status, headers, body) = answers[i.min(answers.len() - 1)];
            i += 1;
            read_request(&mut stream);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// Reads a request's head and its `content-length` body.
fn read_request(stream: &mut TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let _ = reader.take(length).read_to_end(&mut Vec::new());
}

const CREDENTIALS_HINT: &str = "hint: check the user name (--user) and the password \
     (EVI_SYNC_PASSWORD, --password-stdin or the prompt)\n";

#[test]
fn a_wrong_password_at_login_says_so_and_nothing_about_tokens() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let b = Device::new();
    let run = login(&b, &a, &server.url, "not the password");
    assert_starts(
        &run,
        1,
        &format!("error: wrong user name or password\n{CREDENTIALS_HINT}"),
    );
    assert!(!run.stderr.contains("token"), "{}", run.stderr);
}

#[test]
fn a_server_that_is_down_is_said_to_refuse_at_once() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let run = init(&Device::new(), &url);
    assert_starts(
        &run,
        1,
        &format!(
            "error: cannot reach {url}: connection refused\n\
             hint: start evi-server, or check the host and port \
             (evi-server prints the address it listens on)\n"
        ),
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no seconds of silent retries: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_push_to_a_server_gone_down_says_it_retries_then_why_it_failed() {
    let mut server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    server.kill();
    let run: Run = a
        .sync_cmd()
        .env("EVI_SYNC_RETRIES", "2")
        .args(["sync", "push"])
        .output()
        .unwrap()
        .into();
    let url = &server.url;
    assert_eq!(run.code, 1);
    // The one line between says how long the backoff took (0.2 s, more
    // on a loaded machine).
    let (retrying, rest) = run.stderr.split_once('\n').unwrap();
    let (gave_up, rest) = rest.split_once('\n').unwrap();
    assert_eq!(
        retrying,
        format!("cannot reach {url}: connection refused; retrying…")
    );
    assert!(
        gave_up.starts_with("gave up after 2 attempts over "),
        "{gave_up}"
    );
    assert_eq!(
        rest,
        format!(
            "error: cannot reach {url}: connection refused\n\
             hint: start evi-server, or check the host and port \
             (evi-server prints the address it listens on)\n"
        )
    );
}

#[test]
fn https_to_a_plain_http_server_names_the_tls_handshake_and_suggests_http() {
    let server = TestServer::start();
    let addr = server.addr();
    let run = init(&Device::new(), &format!("https://{addr}"));
    assert_starts(
        &run,
        1,
        &format!(
            "error: cannot reach https://{addr}: TLS handshake failed \
             (received corrupt message of type InvalidContentType)\n\
             hint: the server does not speak TLS there: try http://{addr}\n"
        ),
    );
}

#[test]
fn a_server_url_without_a_scheme_is_a_usage_error_before_anything_else() {
    // Nothing listens there: the URL is refused before any request.
    let url = format!("127.0.0.1:{}", free_port());
    let expected = format!(
        "error: the server URL needs http:// or https:// (got \"{url}\")\n\
         hint: for example --server http://{url}\n"
    );
    let dev = Device::new();
    let run = init(&dev, &url);
    assert_eq!((run.code, run.stderr.as_str()), (2, expected.as_str()));
    assert!(!dev.home().join("sync").exists(), "nothing was written");
    // `login` too, before it looks for a key.
    let run = dev.sync(&["sync", "login", "--server", &url, "--user", "pat"]);
    assert_eq!((run.code, run.stderr.as_str()), (2, expected.as_str()));

    let run = init(&dev, "ftp://127.0.0.1:8787");
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (
            2,
            "error: the server URL needs http:// or https:// (got \"ftp://127.0.0.1:8787\")\n\
             hint: for example --server http://127.0.0.1:8787\n"
        )
    );
    assert!(!dev.home().join("sync").exists(), "nothing was written");
}

#[test]
fn a_url_with_a_path_is_not_an_evi_server_and_the_root_is_named() {
    let server = TestServer::start();
    let url = &server.url;
    let run = init(&Device::new(), &format!("{url}/api"));
    assert_starts(
        &run,
        1,
        &format!(
            "error: this does not look like an evi-server (no /healthz at {url}/api/healthz)\n\
             hint: evi-server answers at {url}: use that as the server URL\n"
        ),
    );
}

#[test]
fn another_web_server_is_not_an_evi_server() {
    let url = fake_server(vec![(
        "404 Not Found",
        "content-type: text/html\r\n",
        "<html>nothing here</html>",
    )]);
    let run = init(&Device::new(), &url);
    assert_starts(
        &run,
        1,
        &format!(
            "error: this does not look like an evi-server (no /healthz at {url}/healthz)\n\
             hint: the server URL is where evi-server listens, with no path \
             (for example --server http://127.0.0.1:8787)\n"
        ),
    );
}

#[test]
fn a_rate_limited_login_says_how_long_it_waits_then_retries() {
    let a = Device::new();
    let real = TestServer::start();
    a.init(&real, "pat", "laptop");
    let url = fake_server(vec![
        (
            "429 Too Many Requests",
            "content-type: application/json\r\nretry-after: 1\r\n",
            r#"{"code":"rate_limited","message":"too many attempts; retry later"}"#,
        ),
        (
            "401 Unauthorized",
            "content-type: application/json\r\n",
            r#"{"code":"invalid_credentials","message":"wrong user name or password"}"#,
        ),
    ]);
    let started = Instant::now();
    let run = login(&Device::new(), &a, &url, crate::common::PASSWORD);
    assert_starts(
        &run,
        1,
        &format!(
            "rate limited by the server, retrying in 1 s\n\
             error: wrong user name or password\n{CREDENTIALS_HINT}"
        ),
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited");
}

#[test]
fn a_rate_limit_out_of_retries_says_when_to_try_again() {
    // One attempt a minute from this address: init's register takes it (a
    // right password no longer counts against the user's own budget).
    let server = TestServer::start_with(&["--auth-rate-per-ip", "1"]);
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let b = Device::new();
    std::fs::create_dir_all(b.identity_path().parent().unwrap()).unwrap();
    std::fs::copy(a.identity_path(), b.identity_path()).unwrap();
    let run: Run = b
        .sync_cmd()
        .env("EVI_SYNC_RETRIES", "1")
        .args(["sync", "login", "--server", &server.url, "--user", "pat"])
        .output()
        .unwrap()
        .into();
    assert_starts(
        &run,
        1,
        "error: rate limited by the server (too many attempts)\nhint: try again in ",
    );
    let wait = run.stderr.lines().nth(1).unwrap();
    let secs: u64 = wait
        .strip_prefix("hint: try again in ")
        .and_then(|w| w.strip_suffix(" s"))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{wait:?}"));
    assert!((1..=60).contains(&secs), "{wait}");
}

#[test]
fn a_second_push_says_whom_it_waits_for_when_the_wait_starts() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    let holder = a.hold_sync_lock(4242);
    let mut child = a
        .sync_cmd()
        .args(["sync", "push"])
        .env("EVI_SYNC_LOCK_WAIT", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    // Said while it waits: the holder still holds the lock.
    assert_eq!(first, "waiting for evi sync (pid 4242) …\n");
    holder.unlock().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert_eq!(rest, "");
}
