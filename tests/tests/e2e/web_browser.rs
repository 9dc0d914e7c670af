//! `evi web` in a real browser: headless Chromium driven by chromedriver
//! over the W3C WebDriver protocol (a small client below, reqwest and JSON).
//!
//! The list shows every session; a session shows as many messages as the
//! CLI says its branch has; a fork's switch changes what is shown; a
//! transcript full of `<script>`, `onerror` images and `javascript:` links
//! runs nothing (the title stays, the console holds no error and nothing
//! from a payload, even after the link is clicked); a 200 MB session opens
//! with only its first page in the DOM and a JS heap under 100 MB.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's
//! `chromium` and `chromium-driver`; `.ci/run` installs them). Without them
//! the tests are built ignored, with that reason (see `tests/build.rs`),
//! except under CI (`CI` set), where they run and a missing browser fails
//! them. `EVI_UPDATE_SCREENSHOTS=1` saves the list and a
//! branched session to `docs/screenshots/`.
//!
//! The full-text search finds a line deep in a long session, marks the
//! match, and its link opens that session on the page holding the line,
//! highlighted and scrolled to; the rewind dialog lists the session's
//! checkpoints, shows the plan, undoes it (the files on disk say so), and
//! a POST from another origin's page changes nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::{Device, today};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser is here; if not, says so (and fails under CI).
fn browser_present(test: &str) -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test}: skipped: {} not installed (apt-get install chromium chromium-driver)",
        missing.join(" and ")
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}; CI must install them"
    );
    eprintln!("{why}");
    false
}

// ---------------------------------------------------------------------------
// A tiny WebDriver client.

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
    http: reqwest::blocking::Client,
}

impl Driver {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: evi::sync::remote::client::http_builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
        };
        // It answers /status once it listens.
        for _ in 0..200 {
            let ready = driver
                .http
                .get(format!("{}/status", driver.url))
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return driver;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("chromedriver did not start on port {port}");
    }

    fn session(&self, profile: &Path) -> Browser<'_> {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    "--no-first-run", "--no-default-browser-check",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let v = call(
            &self.http,
            "POST",
            &format!("{}/session", self.url),
            Some(caps),
        );
        let id = v["sessionId"].as_str().expect("a session id").to_owned();
        Browser { driver: self, id }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(http: &reqwest::blocking::Client, method: &str, url: &str, body: Option<Value>) -> Value {
    let req = match method {
        "GET" => http.get(url),
        "DELETE" => http.delete(url),
        _ => http.post(url).json(&body.unwrap_or_else(|| json!({}))),
    };
    let resp = req.send().unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status();
    let v: Value = resp.json().expect("WebDriver answers JSON");
    assert!(status.is_success(), "{method} {url}: {status}: {v}");
    v["value"].clone()
}

/// One browser session.
struct Browser<'d> {
    driver: &'d Driver,
    id: String,
}

impl Browser<'_> {
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.driver.url, self.id);
        call(&self.driver.http, method, &url, body)
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Waits until `condition` (a JS expression) is true; a bounded wait.
    fn wait_for(&self, condition: &str) {
        let script = format!("return !!({condition})");
        for _ in 0..600 {
            if self.js(&script) == true {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "never true: {condition}; the page shows: {}",
            self.text("main")
        );
    }

    fn title(&self) -> String {
        self.cmd("GET", "/title", None).as_str().unwrap().to_owned()
    }

    /// Waits until the page says it rendered (`main[data-state]` is `ready`);
    /// a bounded wait, never a measure.
    fn wait_ready(&self) {
        for _ in 0..1200 {
            match self
                .js("return document.getElementById('main')?.dataset.state || ''")
                .as_str()
            {
                Some("ready") => return,
                Some("failed") => panic!("the page failed: {}", self.text("main")),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        panic!("the page never got ready: {}", self.text("main"));
    }

    fn count(&self, css: &str) -> usize {
        let script = format!("return document.querySelectorAll({}).length", json!(css));
        self.js(&script).as_u64().unwrap() as usize
    }

    fn text(&self, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.innerText : ''",
            json!(css)
        );
        self.js(&script).as_str().unwrap_or_default().to_owned()
    }

    fn click(&self, css: &str) {
        let found = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        let eid = found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("an element id")
            .to_owned();
        self.cmd("POST", &format!("/element/{eid}/click"), None);
    }

    /// Browser console entries since the last call.
    fn console(&self) -> Vec<Value> {
        let v = self.cmd("POST", "/se/log", Some(json!({"type": "browser"})));
        v.as_array().cloned().unwrap_or_default()
    }

    fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.cmd(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": cmd, "params": params})),
        )
    }

    /// `Performance.getMetrics` as name → value.
    fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        self.cdp("Performance.enable", json!({}));
        let v = self.cdp("Performance.getMetrics", json!({}));
        v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_owned(),
                    m["value"].as_f64().unwrap(),
                )
            })
            .collect()
    }

    fn screenshot(&self, name: &str) {
        if std::env::var_os("EVI_UPDATE_SCREENSHOTS").is_none() {
            return;
        }
        let png = self.cmd("GET", "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
        eprintln!("saved {}", dir.join(name).display());
    }
}

impl Drop for Browser<'_> {
    fn drop(&mut self) {
        let url = format!("{}/session/{}", self.driver.url, self.id);
        let _ = self.driver.http.delete(url).send();
    }
}

fn screenshots_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join("screenshots")
}

/// Console entries that are errors, or that a payload wrote.
fn bad_console(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e["level"] == "SEVERE" || e["message"].as_str().unwrap_or("").contains("pwned"))
        .map(|e| e.to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// The homes.

const BRANCHED: &str = "01JWEBBRANCHEDSESSION00000";
const HOSTILE: &str = "01JWEBHOSTILESESSION000000";

/// `HH:MM:SS` of today, as an RFC 3339 time.
fn at(hms: &str) -> String {
    format!("{}T{hms}Z", today())
}

/// The day `n` days before today (UTC).
fn days_ago(n: u64) -> String {
    (chrono::Utc::now().date_naive() - chrono::Days::new(n))
        .format("%Y-%m-%d")
        .to_string()
}

fn line(v: Value) -> String {
    v.to_string()
}

/// A conversation that forks after the third message: the active branch
/// goes on with a fix, the other tried something else first.
fn branched_lines() -> Vec<String> {
    vec![
        line(
            json!({"id": "q1", "parentId": null, "role": "user", "ts": at("09:00:00"),
            "content": "The `sessions list` test fails on CI but passes here. Can you find out why?"}),
        ),
        line(
            json!({"id": "t1", "parentId": "q1", "role": "assistant", "ts": at("09:00:05"),
            "content": "Let me run it the way CI does.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash",
                "arguments": "{\"cmd\":\"TZ=UTC cargo test -p evi-tests sessions::list\"}"}}]}),
        ),
        line(
            json!({"id": "o1", "parentId": "t1", "role": "tool", "tool_name": "bash",
            "tool_call_id": "c1", "ts": at("09:00:40"),
            "content": "running 1 test\ntest sessions::list_is_newest_first ... FAILED\n\nassertion failed: left == right\n  left: \"2026-06-08 23:30\"\n right: \"2026-06-09 01:30\"\n\ntest result: FAILED. 0 passed; 1 failed"}),
        ),
        line(
            json!({"id": "a1", "parentId": "o1", "role": "assistant", "ts": at("09:01:10"),
            "content": "The listing formats times in **local time**, and CI runs in UTC while this machine is on CEST.\n\nTwo ways to fix it:\n\n1. pin `TZ=UTC` in the test environment, or\n2. print times in UTC everywhere.\n\nPinning the environment keeps the output people see unchanged:\n\n```rust\nc.env(\"TZ\", \"UTC\");\n```"}),
        ),
        line(
            json!({"id": "u2", "parentId": "a1", "role": "user", "ts": at("09:02:00"),
            "content": "Pin it in the fixture, please."}),
        ),
        line(
            json!({"id": "a2", "parentId": "u2", "role": "assistant", "ts": at("09:02:30"),
            "content": "Done: `Device::cmd` now sets `TZ=UTC`, and the test passes both here and on CI."}),
        ),
        // The older branch, forking after the tool output.
        line(
            json!({"id": "b1", "parentId": "o1", "role": "assistant", "ts": at("08:59:00"),
            "content": "Maybe the test is flaky. Let me run it ten times."}),
        ),
        line(
            json!({"id": "b2", "parentId": "b1", "role": "user", "ts": at("08:59:30"),
            "content": "It is not flaky, it fails every time on CI."}),
        ),
    ]
}

/// Every way a transcript could try to run script in the viewer.
fn hostile_lines() -> Vec<String> {
    let day = days_ago(6);
    let at = |hms: &str| format!("{day}T{hms}Z");
    let script = "<script>document.title='pwned';console.log('pwned script')</script>";
    let img = "<img src=x onerror=\"document.title='pwned';console.log('pwned img')\">";
    let link = "[x](javascript:document.title='pwned';console.log('pwned link'))";
    vec![
        line(json!({"role": "user", "ts": at("10:00:00"),
            "content": format!("{script}\n\n{img}\n\nclick {link} now")})),
        line(json!({"role": "assistant", "ts": at("10:00:05"),
            "content": format!("![{img}](javascript:console.log('pwned image'))\n\n<a href=\"javascript:console.log('pwned a')\">a</a> <svg onload=\"console.log('pwned svg')\"></svg>\n\n```html\n{script}\n```\n\n**{img}** `{script}` [ok](https://example.invalid/?q=<script>)"),
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": script, "arguments": img}}]})),
        line(
            json!({"role": "tool", "tool_name": img, "tool_call_id": "c9", "ts": at("10:00:06"),
            "content": format!("{script}{img}")}),
        ),
        // Not JSON at all: shown raw.
        format!("{img} not json {script}"),
    ]
}

/// A generated home (`evi-gen-home`) plus the two hand-written sessions.
fn home(sessions: usize) -> (Device, usize) {
    let dev = Device::new();
    dev.generate(&[
        "--sessions",
        &sessions.to_string(),
        "--total-mb",
        "4",
        "--big-mb",
        "1",
    ]);
    let join = |ls: Vec<String>| {
        ls.iter()
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect::<Vec<u8>>()
    };
    dev.write(&today(), BRANCHED, &join(branched_lines()));
    // Six days old: low in the list, out of the screenshot's way.
    dev.write(&days_ago(6), HOSTILE, &join(hostile_lines()));
    (dev, sessions + 2)
}

fn branch_messages(dev: &Device, id: &str) -> usize {
    let run = dev.evi(&["sessions", "show", id, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    v["branch_messages"].as_u64().unwrap() as usize
}

/// Scrolls to the end until the page says there is no more to load
/// (`main[data-more]` is `no`); the number of `css` elements then.
fn scroll_to_end(b: &Browser<'_>, css: &str) -> usize {
    for _ in 0..1200 {
        b.js("window.scrollTo(0, document.body.scrollHeight)");
        if b.js("return document.getElementById('main').dataset.more") == "no" {
            return b.count(css);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the page kept loading: {} so far", b.count(css));
}

/// Marks the document shown now, so that [`Browser::wait_ready`] after a
/// click waits for the next one.
fn mark_old(b: &Browser<'_>) {
    b.js("document.getElementById('main').dataset.state = 'old'");
}

// ---------------------------------------------------------------------------

#[test]
#[cfg_attr(
    evi_no_browser,
    ignore = "needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"
)]
fn list_session_branches_and_hostile_text_in_chromium() {
    if !browser_present("list_session_branches_and_hostile_text_in_chromium") {
        return;
    }
    let (dev, total) = home(60);
    // Titles (`evi sessions title`) stand for their sessions, as text.
    let hostile_title = "<img src=x onerror=\"document.title='pwned'\"> named";
    for (id, t) in [(HOSTILE, hostile_title), (BRANCHED, "The flaky list test")] {
        let run = dev.evi(&["sessions", "title", id, "--set", t]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let web = dev.web("127.0.0.1:0");
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let b = driver.session(profile.path());

    // The list: a first page of 50, the rest as it scrolls.
    b.go(&web.url);
    b.wait_ready();
    assert_eq!(b.title(), "evi sessions");
    assert_eq!(b.text(".count"), format!("{total} sessions"));
    assert_eq!(b.count(".row"), 50);
    b.screenshot("list.png");
    assert_eq!(scroll_to_end(&b, ".row"), total);
    let row = |id: &str| {
        b.js(&format!(
            "return document.querySelector('.row[data-session=\"{id}\"] .first').textContent"
        ))
    };
    assert_eq!(row(HOSTILE), hostile_title);
    assert_eq!(row(BRANCHED), "The flaky list test");
    // The search narrows it.
    b.js("const q = document.querySelector('.search'); q.value = 'sessions list test fails'; q.dispatchEvent(new Event('input'))");
    // Waited for as every other change of the page is (ten seconds, as
    // before, is not long on a busy machine).
    b.wait_for(
        "document.querySelector('.count').innerText === '1 session' \
         && document.querySelectorAll('.row').length === 1",
    );
    assert_eq!(b.text(".count"), "1 session");
    assert_eq!(
        b.js("return document.querySelector('.row').dataset.session"),
        BRANCHED
    );

    // A generated session longer than a page: every message, once scrolled.
    let big = std::fs::read_to_string(dev.home().join("gen-home.txt")).unwrap();
    let big = big
        .lines()
        .find_map(|l| l.strip_prefix("big_session="))
        .unwrap()
        .to_owned();
    let expected = branch_messages(&dev, &big);
    assert!(expected > 50, "{expected}");
    b.go(&format!(
        "{}/?session={}",
        web.base,
        &big[..10].to_lowercase()
    ));
    b.wait_ready();
    assert_eq!(b.count(".msg"), 50);
    assert_eq!(scroll_to_end(&b, ".msg"), expected);

    // The branched session: the active branch, then the other one.
    b.go(&format!("{}/?session={BRANCHED}", web.base));
    b.wait_ready();
    assert_eq!(b.title(), format!("evi session {}", &BRANCHED[..8]));
    assert_eq!(b.text("h1"), "The flaky list test");
    assert_eq!(b.count(".msg"), branch_messages(&dev, BRANCHED));
    assert_eq!(b.count(".msg"), 6);
    assert_eq!(b.count(".fork .choice"), 2);
    assert!(
        b.text(".msg:last-of-type")
            .contains("the test passes both here and on CI")
    );
    b.screenshot("session-branched.png");
    mark_old(&b);
    b.click(".fork a.choice");
    b.wait_ready();
    let ids = b.js("return [...document.querySelectorAll('.msg')].map(m => m.dataset.entry)");
    assert_eq!(ids, json!(["q1", "t1", "o1", "b1", "b2"]));
    assert!(b.text("main").contains("It is not flaky"));
    assert!(!b.text("main").contains("Pin it in the fixture"));
    assert_eq!(b.count(".fork .choice.current"), 1);
    assert_eq!(
        b.js("return document.querySelector('.fork .choice.current').dataset.entry"),
        "b1"
    );

    // The hostile session: all of it shown as text, nothing run.
    b.go(&format!("{}/?session={HOSTILE}", web.base));
    b.wait_ready();
    let title = format!("evi session {}", &HOSTILE[..8]);
    assert_eq!(b.title(), title);
    assert_eq!(b.text("h1"), hostile_title);
    assert_eq!(b.count(".msg"), 4, "a title is not a message");
    let shown = b.text("main");
    for text in [
        "<script>document.title='pwned'",
        "onerror=\"document.title='pwned'",
        "not json",
    ] {
        assert!(
            shown.contains(text),
            "{text} not shown as text in:\n{shown}"
        );
    }
    // No element a payload names made it into the document.
    assert_eq!(
        b.count("main script, main img, main svg, main iframe, main [onerror], main [onload]"),
        0
    );
    assert_eq!(b.count("a[href^='javascript:' i]"), 0);
    assert_eq!(
        b.count(".dead-link"),
        2,
        "the javascript: links are shown as text"
    );
    b.click(".dead-link");
    // Tool output and calls: collapsed, with their name and size.
    assert_eq!(b.count("details.tool-out:not([open])"), 1);
    assert!(b.text("details.tool-out summary").contains(" result · "));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.title(), title);
    assert_eq!(b.js("return document.title.includes('pwned')"), false);
    let console = b.console();
    assert_eq!(
        bad_console(&console),
        Vec::<String>::new(),
        "console: {console:?}"
    );
}

#[test]
#[cfg_attr(
    evi_no_browser,
    ignore = "needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"
)]
fn a_200_mb_session_opens_with_one_page_in_the_dom() {
    if !browser_present("a_200_mb_session_opens_with_one_page_in_the_dom") {
        return;
    }
    let dev = Device::new();
    let summary = dev.generate(&["--sessions", "3", "--total-mb", "202", "--big-mb", "200"]);
    let big = summary
        .lines()
        .find_map(|l| l.strip_prefix("big_session="))
        .unwrap()
        .to_owned();
    let size: u64 = walk_sizes(&dev.home().join("transcripts"), &big);
    assert!(size >= 200_000_000, "{size}");

    let web = dev.web("127.0.0.1:0");
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let b = driver.session(profile.path());
    // The viewer is up and the browser warm: what is measured is the open.
    b.go(&web.url);
    b.wait_ready();

    let started = Instant::now();
    b.go(&format!("{}/?session={big}", web.base));
    b.wait_ready();
    let wall = started.elapsed();
    let in_page = b
        .js("return Number(document.body.dataset.readyMs)")
        .as_f64()
        .unwrap();
    let messages = b.count(".msg");
    let metrics = b.metrics();
    let heap = metrics["JSHeapUsedSize"];
    eprintln!(
        "200 MB session ({size} bytes): opened in {in_page:.0} ms after navigation \
         ({:.0} ms seen by the test), {messages} messages in the DOM, JS heap {:.1} MB used \
         of {:.1} MB, {} DOM nodes",
        wall.as_secs_f64() * 1000.0,
        heap / 1e6,
        metrics["JSHeapTotalSize"] / 1e6,
        metrics["Nodes"]
    );
    assert_eq!(messages, 50, "only the first page is in the DOM");
    let total = b.js("return document.getElementById('branch-count').textContent");
    assert!(
        total
            .as_str()
            .unwrap()
            .ends_with(" messages on this branch"),
        "{total}"
    );
    assert!(heap < 100e6, "JS heap {heap} bytes");
    assert_eq!(bad_console(&b.console()), Vec::<String>::new());
}

/// Bytes of a session's files under `transcripts/`.
fn walk_sizes(dir: &Path, session: &str) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|d| std::fs::metadata(d.unwrap().path().join(format!("{session}.jsonl"))).ok())
        .map(|m| m.len())
        .sum()
}

/// A page of another origin (a plain HTTP server on another port), for
/// cross-site requests: answers every request with the same HTML.
fn other_origin() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = "<!doctype html><title>elsewhere</title><p>another site</p>";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://localhost:{port}/")
}

#[test]
#[cfg_attr(
    evi_no_browser,
    ignore = "needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"
)]
fn search_hits_open_their_entry_and_the_rewind_dialog_undoes_in_chromium() {
    if !browser_present("search_hits_open_their_entry_and_the_rewind_dialog_undoes_in_chromium") {
        return;
    }
    let r = crate::web::Rewound::new();
    let dev = &r.dev;
    // A long session: the line searched for is the 100th, on the second page.
    const LONG: &str = "01JWEBLONGSEARCHED00000000";
    let long: Vec<String> = (1..=120)
        .map(|n| {
            let text = if n == 100 {
                "the migration ran with the quokka flag".to_owned()
            } else {
                format!("message number {n}")
            };
            let role = if n % 2 == 1 { "user" } else { "assistant" };
            line(json!({"role": role, "content": text, "ts": at(&format!("08:{:02}:{:02}", n / 60, n % 60))}))
        })
        .collect();
    dev.write(
        &today(),
        LONG,
        &long
            .iter()
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect::<Vec<u8>>(),
    );
    let web = dev.web("127.0.0.1:0");
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let b = driver.session(profile.path());

    // Type a query: one hit, the match marked, as text.
    b.go(&web.url);
    b.wait_ready();
    b.js("const q = document.querySelector('.fts'); q.value = 'QUOKKA flag'; q.dispatchEvent(new Event('input'))");
    b.wait_for("document.querySelector('.fulltext').dataset.state === 'done'");
    assert_eq!(b.text(".fts-count"), "1 hit");
    assert_eq!(b.count(".hit"), 1);
    let marks =
        b.js("return [...document.querySelectorAll('.hit .snippet mark')].map(m => m.textContent)");
    assert_eq!(marks, json!(["quokka", "flag"]));
    assert_eq!(
        b.text(".hit .snippet"),
        "the migration ran with the quokka flag"
    );
    assert_eq!(b.text(".hit .who"), "assistant");
    let entry = b.js("return document.querySelector('.hit').dataset.entry");
    // A hostile query is a message on the page, not a crash.
    b.js("const q = document.querySelector('.fts'); q.value = '* ( )'; q.dispatchEvent(new Event('input'))");
    b.wait_for("document.querySelector('.fulltext').dataset.state === 'failed'");
    assert!(
        b.text(".hits .failure")
            .contains("the query has no word to search for"),
        "{}",
        b.text(".hits")
    );
    b.js("const q = document.querySelector('.fts'); q.value = 'quokka'; q.dispatchEvent(new Event('input'))");
    b.wait_for("document.querySelector('.fulltext').dataset.state === 'done'");

    // Click it: the session opens on the page holding the entry,
    // highlighted and in view.
    mark_old(&b);
    b.click(".hit");
    b.wait_ready();
    assert_eq!(
        b.js("return new URLSearchParams(location.search).get('session')"),
        LONG
    );
    assert_eq!(b.count(".msg.target"), 1);
    assert_eq!(
        b.js("return document.querySelector('.msg.target').dataset.entry"),
        entry
    );
    assert!(b.text(".msg.target").contains("quokka flag"));
    assert_eq!(
        b.js("return document.querySelector('.msg').dataset.n"),
        "51",
        "the second page of 50"
    );
    b.wait_for("(() => { const r = document.querySelector('.msg.target').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()");
    assert!(b.js("return scrollY").as_f64().unwrap() > 0.0);
    // Earlier messages are a click away, at the top.
    b.js("window.scrollTo(0, 0)");
    b.click(".earlier");
    b.wait_for("document.querySelector('.msg').dataset.n === '1'");
    assert_eq!(b.count(".msg.target"), 1);

    // A POST from another site's page is refused and changes nothing.
    let before = r.state();
    let elsewhere = other_origin();
    b.go(&elsewhere);
    // A form posted from there (a fetch could not even read the answer):
    // the browser shows what the viewer said.
    b.js(&format!(
        "const f = document.createElement('form');
         f.method = 'POST'; f.action = {}; f.enctype = 'text/plain';
         const i = document.createElement('input');
         i.name = '{{\"seq\":1,\"digest\":\"'; i.value = 'x\"}}';
         f.append(i); document.body.append(f); f.submit();",
        json!(format!("{}/api/rewind", web.base))
    ));
    b.wait_for(&format!(
        "location.href.startsWith({}) && document.body && document.body.innerText.includes('csrf')",
        json!(web.base)
    ));
    let answer: Value = serde_json::from_str(&b.text("body")).unwrap();
    assert_eq!(answer["code"], "csrf", "{answer}");
    assert_eq!(
        answer["message"],
        "refused: the request does not come from this viewer's own page"
    );
    assert_eq!(r.state(), before, "a cross-site POST rewound");

    // The refused requests (the hostile query, the cross-site POST) are
    // the console's only complaints: no script failed.
    let errors: Vec<String> = bad_console(&b.console())
        .into_iter()
        .filter(|e| !e.contains("\"source\":\"network\""))
        .collect();
    assert_eq!(errors, Vec::<String>::new());

    // The dialog: the session's checkpoints, newest first, not seq 6
    // (written after the session).
    b.go(&format!("{}/?session={}", web.base, crate::web::SPANNED));
    b.wait_ready();
    b.click(".open-rewind");
    b.wait_for("document.querySelector('dialog.rewind').dataset.state === 'listed'");
    assert_eq!(
        b.js("return document.querySelector('dialog.rewind').open"),
        true
    );
    let seqs =
        b.js("return [...document.querySelectorAll('dialog .cps .cp')].map(c => c.dataset.seq)");
    assert_eq!(seqs, json!(["5", "4", "3", "2", "1"]));
    assert!(
        b.text("dialog .cp[data-seq='4']")
            .contains("cannot be undone: not snapshotted")
    );

    // Undo from 2: first the plan, nothing touched yet.
    b.click("dialog .cp[data-seq='2'] .undo-from");
    b.wait_for("document.querySelector('dialog.rewind').dataset.state === 'planned'");
    let plan = b.js("return [...document.querySelectorAll('dialog .step')].map(s => s.dataset.seq + ' ' + s.dataset.action)");
    assert_eq!(
        plan,
        json!([
            "6 restore",
            "5 restore",
            "4 failed",
            "3 restore",
            "2 delete"
        ])
    );
    assert!(b.text("dialog .plan-head").contains("undoes 5 writes"));
    assert_eq!(r.state(), before, "the plan changed something");
    assert_eq!(b.text("dialog .confirm"), "Undo 4 writes");
    b.click("dialog .confirm");
    b.wait_for("document.querySelector('dialog.rewind').dataset.state === 'done'");
    let done =
        b.js("return [...document.querySelectorAll('dialog .step')].map(s => s.dataset.action)");
    assert_eq!(
        done,
        json!(["restored", "restored", "failed", "restored", "deleted"])
    );
    assert!(
        b.text("dialog .plan-head")
            .starts_with("Undid 4 of 5 writes; 1 checkpoints left")
    );
    let read = |f: &str| std::fs::read_to_string(r.path(f)).ok();
    assert_eq!(read("app.py").as_deref(), Some("app v1\n"));
    assert_eq!(read("util.py").as_deref(), Some("util v0\n"));
    assert_eq!(read("late.py").as_deref(), Some("late v0\n"));
    assert_eq!(read("new.py"), None, "eVi created it");
    assert_eq!(
        read("data.bin").as_deref(),
        Some("huge v1\n"),
        "a skip is not undone"
    );
    assert_eq!(bad_console(&b.console()), Vec::<String>::new());
}

#[test]
#[cfg_attr(
    evi_no_browser,
    ignore = "needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"
)]
fn other_agents_sessions_are_listed_filtered_searched_and_opened_in_chromium() {
    if !browser_present("other_agents_sessions_are_listed_filtered_searched_and_opened_in_chromium")
    {
        return;
    }
    use crate::agents::{
        CODEX_TOOLS_ID, CODEX_TOOLS_REL, SECRETS, TOOLS_ID, claude_session, codex, enable, fixture,
        project, put,
    };
    const EVI: &str = "01JWEBBROWSERAGENTS0000000";
    let dev = Device::new();
    enable(&dev, "");
    let proj = project(&dev, "work/zebra-app");
    dev.write(
        &today(),
        EVI,
        format!(
            "{}\n",
            line(json!({"role": "user", "content": "an eVi session", "ts": at("08:00:00")}))
        )
        .as_bytes(),
    );
    put(
        &claude_session(&dev, &proj, TOOLS_ID),
        &fixture("claude-code-tools.jsonl", &proj),
    );
    put(
        &codex(&dev).join(CODEX_TOOLS_REL),
        &fixture("codex-tools.jsonl", &proj),
    );
    let web = dev.web("127.0.0.1:0");
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let b = driver.session(profile.path());

    // Every agent's sessions, each row marked with its agent and project.
    b.go(&web.url);
    b.wait_ready();
    assert_eq!(b.text(".count"), "3 sessions");
    let cc_row = format!(".row[data-session=\"claude-code/{TOOLS_ID}\"]");
    assert_eq!(b.text(&format!("{cc_row} .agent-tag")), "claude-code");
    assert_eq!(b.text(&format!("{cc_row} .project")), proj);
    assert!(
        b.text(&format!("{cc_row} .first"))
            .contains("Lexer off-by-one fix")
    );
    assert_eq!(
        b.js("return document.querySelector('.row[data-session=\"01JWEBBROWSERAGENTS0000000\"] .agent-tag')"),
        Value::Null,
        "eVi's rows read as they always did"
    );
    // The agent filter: shown, one option per agent turned on.
    assert_eq!(
        b.js("const s = document.querySelector('.agent-filter'); return s.hidden ? null : [...s.options].map(o => o.value)"),
        json!(["", "evi", "claude-code", "codex", "gemini"])
    );
    b.js("const s = document.querySelector('.agent-filter'); s.value = 'codex'; s.dispatchEvent(new Event('change'))");
    b.wait_for("document.querySelectorAll('.row').length === 1 && document.querySelector('.count').textContent === '1 session'");
    let cx_row = format!("codex/{CODEX_TOOLS_ID}");
    assert_eq!(
        b.js("return document.querySelector('.row').dataset.session"),
        cx_row.as_str()
    );
    b.wait_for("new URLSearchParams(location.search).get('agent') === 'codex'");

    // A row opens its session: the conversation, tree-aware, no secret.
    mark_old(&b);
    b.click(".row");
    b.wait_ready();
    assert_eq!(b.text("h1"), "List the files");
    assert_eq!(b.count(".msg"), 6);
    assert_eq!(b.text(".session-head .agent-tag"), "codex");
    assert!(b.text("main").contains("There are two files"));
    // Folded parts (reasoning, calls, outputs) included.
    let main = b.js("return document.getElementById('main').textContent");
    let main = main.as_str().unwrap();
    assert!(main.contains("Checking directory"), "{main}");
    for s in SECRETS {
        assert!(!main.contains(s), "{s} shown: {main}");
    }

    // The search box finds a Claude Code line; its hit opens that entry.
    b.go(&format!("{}/?search=emit", web.base));
    b.wait_for("document.querySelector('.fulltext').dataset.state === 'done'");
    assert_eq!(b.count(".hit"), 1);
    assert_eq!(b.text(".hit .agent-tag"), "claude-code");
    mark_old(&b);
    b.click(".hit");
    b.wait_ready();
    assert_eq!(
        b.js("return new URLSearchParams(location.search).get('session')"),
        format!("claude-code/{TOOLS_ID}")
    );
    assert_eq!(b.count(".msg.target"), 1);
    // A tool's output is folded: in the page, if not in view.
    let target = b.js("return document.querySelector('.msg.target').textContent");
    assert!(
        target.as_str().unwrap().contains("emit(tokens[i])"),
        "{target}"
    );
    assert_eq!(bad_console(&b.console()), Vec::<String>::new());
}
