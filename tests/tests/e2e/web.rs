//! `evi web` over plain HTTP: the API answers what the CLI's `--json` says,
//! in the same shapes; ids resolve as in the CLI; every answer carries the
//! safety headers; off loopback nothing is served without the token; the
//! pull button's POST needs this origin and the page's CSRF token, and pulls
//! a session that is only on the server; browsing writes nothing.

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::Value;

use crate::common::{Device, TestServer, WebViewer};

const BRANCHED: &str = "01JWEBBRANCHED000000000000";
const LONG: &str = "01JWEBLONG0000000000000000";
const LONG_TWIN: &str = "01JWEBLONG0000000000000001";

fn lines(ls: &[String]) -> Vec<u8> {
    ls.iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

/// A home with a branched session, a 120-message session with one tool
/// output of 40 KB, and a second session sharing its first 25 characters.
fn home() -> Device {
    let dev = Device::new();
    dev.write(
        "2026-06-08",
        BRANCHED,
        &lines(&[
            r#"{"id":"r1","parentId":null,"role":"user","content":"pick a name","ts":"2026-06-08T10:00:00Z"}"#.into(),
            r#"{"id":"a1","parentId":"r1","role":"assistant","content":"call it **tern**","ts":"2026-06-08T10:01:00Z"}"#.into(),
            r#"{"id":"b1","parentId":"r1","role":"assistant","content":"call it heron","ts":"2026-06-08T10:02:00Z"}"#.into(),
            r#"{"id":"b2","parentId":"b1","role":"user","content":"heron it is","ts":"2026-06-08T10:03:00Z"}"#.into(),
        ]),
    );
    let mut long = Vec::new();
    for n in 0..120 {
        let ts = format!("2026-06-09T10:{:02}:{:02}Z", n / 60, n % 60);
        long.push(match n % 3 {
            0 => format!(r#"{{"role":"user","content":"question {n}","ts":"{ts}"}}"#),
            1 => format!(
                r#"{{"role":"assistant","content":"running","tool_calls":[{{"id":"c{n}","function":{{"name":"bash","arguments":"{{}}"}}}}],"ts":"{ts}"}}"#
            ),
            _ => {
                let out = if n == 5 { "x".repeat(40_000) } else { format!("out {n}") };
                format!(
                    r#"{{"role":"tool","tool_name":"bash","tool_call_id":"c{}","content":"{out}","ts":"{ts}"}}"#,
                    n - 1
                )
            }
        });
    }
    dev.write("2026-06-09", LONG, &lines(&long));
    dev.write(
        "2026-06-07",
        LONG_TWIN,
        &lines(&[r#"{"role":"user","content":"the twin","ts":"2026-06-07T08:00:00Z"}"#.into()]),
    );
    dev
}

fn get(web: &WebViewer, path: &str) -> Response {
    Client::new()
        .get(format!("{}{path}", web.base))
        .send()
        .expect("GET the viewer")
}

fn json(resp: Response) -> Value {
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    resp.json().expect("a JSON body")
}

fn cli_json(dev: &Device, args: &[&str]) -> Value {
    let run = dev.evi(args);
    assert_eq!(run.code, 0, "evi {args:?}: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

#[test]
fn api_answers_what_the_cli_prints_in_the_same_shapes() {
    let dev = home();
    let web = dev.web("127.0.0.1:0");

    let listing = json(get(&web, "/api/sessions"));
    let cli = cli_json(&dev, &["sessions", "list", "--json", "--days", "36500"]);
    assert_eq!(listing["sessions"], cli["sessions"]);
    assert_eq!(listing["total"], 3);
    assert_eq!(listing["next_offset"], Value::Null);
    assert_eq!(
        listing["days"],
        serde_json::json!([
            {"day": "2026-06-09", "sessions": 1},
            {"day": "2026-06-08", "sessions": 1},
            {"day": "2026-06-07", "sessions": 1},
        ])
    );

    // A lowercase prefix resolves like the CLI's; the page is exactly what
    // `show --json` prints for the same messages.
    let page = json(get(&web, "/api/sessions/01jwebbr?limit=500"));
    let shown = cli_json(&dev, &["sessions", "show", "01jwebbr", "--json"]);
    assert_eq!(page, shown);
    assert_eq!(page["session"], cli["sessions"][1]);
    let ids: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["r1", "b1", "b2"], "the active branch is the newest");
    let forks = &page["messages"][0]["forks"];
    assert_eq!(forks.as_array().unwrap().len(), 2);
    assert_eq!(forks[0]["entry"], "a1");
    assert_eq!(forks[0]["current"], false);
    assert_eq!(forks[1]["entry"], "b1");
    assert_eq!(forks[1]["current"], true);

    // The other branch, through the entry its switch names.
    let other = json(get(&web, "/api/sessions/01JWEBBR?through=a1"));
    let ids: Vec<&str> = other["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["r1", "a1"]);
    assert_eq!(other["leaf"], "a1");
    assert_eq!(other["active_leaf"], "b2");
    let through = cli_json(
        &dev,
        &["sessions", "show", BRANCHED, "--json", "--through", "a1"],
    );
    assert_eq!(other, through);
}

#[test]
fn long_sessions_come_in_pages_with_big_texts_cut() {
    let dev = home();
    let web = dev.web("127.0.0.1:0");
    let whole = cli_json(&dev, &["sessions", "show", LONG, "--json"]);
    assert_eq!(whole["branch_messages"], 120);

    let mut got = Vec::new();
    let mut offset = Some(0);
    let mut pages = 0;
    while let Some(o) = offset {
        let page = json(get(
            &web,
            &format!("/api/sessions/{LONG}?offset={o}&limit=50"),
        ));
        assert_eq!(page["offset"], o);
        got.extend(page["messages"].as_array().unwrap().iter().cloned());
        offset = page["next_offset"].as_u64();
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(got.len(), 120);
    let ns: Vec<u64> = got.iter().map(|m| m["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, (1..=120).collect::<Vec<_>>());

    // Entry 6 holds the 40 KB output: cut in the page, whole on its own.
    let big = &got[5];
    assert_eq!(big["truncated"], true);
    assert_eq!(big["text_bytes"], 40_000);
    assert_eq!(big["text"].as_str().unwrap().len(), 16 * 1024);
    let entry = json(get(
        &web,
        &format!(
            "/api/sessions/{LONG}/entries/{}",
            big["id"].as_str().unwrap()
        ),
    ));
    assert_eq!(entry["truncated"], false);
    assert_eq!(entry["text"], "x".repeat(40_000));
    assert_eq!(entry, whole["messages"][5]);
    // Every other message is as `show --json` has it.
    for (k, m) in got.iter().enumerate().filter(|(k, _)| *k != 5) {
        assert_eq!(*m, whole["messages"][k], "message {}", k + 1);
    }

    // The list pages too, and searches first messages and ids.
    let first = json(get(&web, "/api/sessions?limit=2"));
    assert_eq!(first["sessions"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_offset"], 2);
    let rest = json(get(&web, "/api/sessions?limit=2&offset=2"));
    assert_eq!(rest["sessions"][0]["id"], LONG_TWIN);
    assert_eq!(rest["next_offset"], Value::Null);
    let hits = json(get(&web, "/api/sessions?q=THE+twin"));
    assert_eq!(hits["total"], 1);
    assert_eq!(hits["sessions"][0]["id"], LONG_TWIN);
    let by_day = json(get(&web, "/api/sessions?day=2026-06-08"));
    assert_eq!(by_day["total"], 1);
    assert_eq!(by_day["sessions"][0]["id"], BRANCHED);
    let bad_day = get(&web, "/api/sessions?day=yesterday");
    assert_eq!(bad_day.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json(bad_day)["code"], "bad_request");
}

#[test]
fn unknown_and_ambiguous_ids_are_json_errors() {
    let dev = home();
    let web = dev.web("127.0.0.1:0");
    let missing = get(&web, "/api/sessions/01JNOPE");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body = json(missing);
    assert_eq!(body["code"], "session_not_found");
    assert_eq!(
        body["message"],
        "no session matches `01JNOPE` on this device"
    );
    assert_eq!(body["pull_available"], false, "this home has no sync");

    let twins = get(&web, "/api/sessions/01JWEBLONG");
    assert_eq!(twins.status(), StatusCode::BAD_REQUEST);
    let body = json(twins);
    assert_eq!(body["code"], "ambiguous_session");
    assert_eq!(body["message"], "`01JWEBLONG` matches 2 sessions");
    assert_eq!(body["hint"], "type more characters of the id");
    assert_eq!(body["matches"], serde_json::json!([LONG, LONG_TWIN]));

    let no_entry = get(&web, &format!("/api/sessions/{BRANCHED}?through=zz"));
    assert_eq!(no_entry.status(), StatusCode::NOT_FOUND);
    assert_eq!(json(no_entry)["code"], "entry_not_found");
    let no_route = get(&web, "/api/nothing");
    assert_eq!(no_route.status(), StatusCode::NOT_FOUND);
    assert_eq!(json(no_route)["code"], "not_found");
}

#[test]
fn every_answer_carries_the_safety_headers_and_the_page_no_inline_script() {
    let dev = home();
    let before = dev.tree("");
    let web = dev.web("127.0.0.1:0");
    for path in [
        "/",
        "/?session=01JWEBBR",
        "/app.js",
        "/app.css",
        "/api/sessions",
        "/api/sessions/nope",
    ] {
        let resp = get(&web, path);
        let h = resp.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        for part in [
            "default-src 'self'",
            "script-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
        ] {
            assert!(csp.contains(part), "{path}: CSP lacks {part}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
    }
    let page = get(&web, "/?session=01JWEBBR");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text().unwrap();
    assert!(html.contains(r#"<script src="/app.js" defer></script>"#));
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(
        !html.contains("style=") && !html.contains("<style"),
        "{html}"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external asset"
    );
    let js = get(&web, "/app.js");
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );

    // A page whose host name is not loopback (DNS rebinding) is refused.
    let rebound = Client::new()
        .get(format!("{}/api/sessions", web.base))
        .header("Host", "evil.example:7878")
        .send()
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    assert_eq!(json(rebound)["code"], "bad_host");

    drop(web);
    assert_eq!(dev.tree(""), before, "browsing wrote to the home");
}

#[test]
fn off_loopback_every_request_needs_the_printed_token() {
    let dev = home();
    // Bound to every address; the test only ever talks to 127.0.0.1.
    let web = dev.web("0.0.0.0:0");
    let (_, token) = web
        .url
        .split_once("/?token=")
        .expect("the URL carries a token");
    assert_eq!(token.len(), 64);
    assert!(
        web.stderr().contains("other machines may reach"),
        "{}",
        web.stderr()
    );
    let port = web.base.rsplit(':').next().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = Client::new();
    for path in [
        "/",
        "/app.js",
        "/api/sessions",
        &format!("/api/sessions/{BRANCHED}"),
    ] {
        let resp = client.get(format!("{base}{path}")).send().unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(json(resp)["code"], "token_required");
    }
    let wrong = client
        .get(format!("{base}/api/sessions?token={}", "0".repeat(64)))
        .send()
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    // The printed URL opens, and sets the cookie the page's requests carry.
    let page = client.get(format!("{base}/?token={token}")).send().unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let cookie = page.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let api = client
        .get(format!("{base}/api/sessions"))
        .header("Cookie", pair)
        .send()
        .unwrap();
    assert_eq!(api.status(), StatusCode::OK);
    assert_eq!(json(api)["total"], 3);
}

/// The CSRF token the page carries.
fn csrf_of(web: &WebViewer) -> String {
    let html = get(web, "/").text().unwrap();
    let at = html
        .find(r#"name="evi-csrf" content=""#)
        .expect("csrf meta")
        + 25;
    html[at..at + 64].to_owned()
}

fn post_pull(web: &WebViewer, origin: Option<&str>, csrf: Option<&str>, session: &str) -> Response {
    let mut req = Client::new()
        .post(format!("{}/api/pull", web.base))
        .json(&serde_json::json!({ "session": session }));
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    if let Some(c) = csrf {
        req = req.header("X-Evi-Csrf", c);
    }
    req.send().unwrap()
}

#[test]
fn pull_button_needs_this_origin_and_the_csrf_token_then_pulls() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    a.write(
        "2026-06-08",
        BRANCHED,
        &lines(&[
            r#"{"role":"user","content":"only on the laptop","ts":"2026-06-08T10:00:00Z"}"#.into(),
        ]),
    );
    a.sync_ok(&["push"]);

    let web = b.web("127.0.0.1:0");
    let missing = get(&web, &format!("/api/sessions/{BRANCHED}"));
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(json(missing)["pull_available"], true);

    let csrf = csrf_of(&web);
    let own = web.base.as_str();
    let before = b.tree("transcripts");
    for (origin, token, why) in [
        (None, Some(csrf.as_str()), "no Origin"),
        (
            Some("http://evil.example"),
            Some(csrf.as_str()),
            "another origin",
        ),
        (Some(own), None, "no CSRF token"),
        (Some(own), Some("0000"), "a wrong CSRF token"),
    ] {
        let resp = post_pull(&web, origin, token, BRANCHED);
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{why}");
        assert_eq!(json(resp)["code"], "csrf", "{why}");
    }
    assert_eq!(b.tree("transcripts"), before, "a refused POST pulled");

    let ok = post_pull(&web, Some(own), Some(&csrf), "01jwebbr");
    assert_eq!(ok.status(), StatusCode::OK);
    let body = json(ok);
    assert_eq!(body["found"], BRANCHED);
    assert_eq!(body["entries"], 1);
    let page = json(get(&web, "/api/sessions/01JWEBBR"));
    assert_eq!(page["messages"][0]["text"], "only on the laptop");
}

#[test]
fn pull_button_fetches_the_session_asked_for_alone() {
    let (_server, a, b) = crate::common::two_devices();
    let line = |what: &str| {
        lines(&[format!(
            r#"{{"role":"user","content":"{what}","ts":"2026-06-08T10:00:00Z"}}"#
        )])
    };
    a.write("2026-06-08", BRANCHED, &line("wanted"));
    a.write("2026-06-08", "01JWEBSOMETHINGELSE", &line("not asked for"));
    a.sync_ok(&["push"]);

    let web = b.web("127.0.0.1:0");
    let csrf = csrf_of(&web);
    let ok = post_pull(&web, Some(&web.base), Some(&csrf), BRANCHED);
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(json(ok)["found"], BRANCHED);
    assert_eq!(
        crate::common::sessions(&b),
        [BRANCHED.to_owned()].into(),
        "the other session came too"
    );
    assert_eq!(b.state()["cursor"], 0, "the global cursor moved");
}

#[test]
fn pull_without_sync_says_so() {
    let dev = home();
    let web = dev.web("127.0.0.1:0");
    let csrf = csrf_of(&web);
    let resp = post_pull(&web, Some(&web.base), Some(&csrf), "01JNOPE");
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let body = json(resp);
    assert_eq!(body["code"], "sync_not_set_up");
    assert!(body["hint"].as_str().unwrap().contains("evi sync login"));
}

#[test]
fn bad_listen_addresses_are_clear_errors() {
    let dev = home();
    let run = dev.evi(&["web", "--listen", "nowhere"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "error: cannot listen on `nowhere`: not an address\n\
         hint: use HOST:PORT, for example --listen 127.0.0.1:7878\n"
    );
    let web = dev.web("127.0.0.1:0");
    let addr = web.base.strip_prefix("http://").unwrap();
    let run = dev.evi(&["web", "--listen", addr]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with(&format!("error: cannot listen on {addr}: ")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("another `evi web` may be running"),
        "{}",
        run.stderr
    );
}

/// Kills a process this test started indirectly, by its id, when dropped.
struct KillOnDrop(String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg(&self.0).status();
    }
}

#[test]
fn sessions_open_starts_the_viewer_once_and_prints_the_url() {
    let dev = home();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    dev.write_config(&format!("[web]\nurl = \"http://127.0.0.1:{port}\"\n"));
    let run = dev.evi(&["sessions", "open", "01jwebbr", "--no-browser"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!("http://127.0.0.1:{port}/?session={BRANCHED}\n")
    );
    let pid = run
        .stderr
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap_or_else(|| panic!("no pid in {:?}", run.stderr))
        .to_owned();
    let _viewer = KillOnDrop(pid);
    assert_eq!(
        run.stderr,
        format!(
            "started the viewer on 127.0.0.1:{port} (pid {}; it runs until stopped)\n",
            _viewer.0
        )
    );
    let page = Client::new()
        .get(format!("http://127.0.0.1:{port}/api/sessions/{BRANCHED}"))
        .send()
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(json(page)["session"]["id"], BRANCHED);

    // Running already: the second open only prints the URL. A session that
    // is not here goes through as typed (the page offers to pull it).
    let again = dev.evi(&["sessions", "open", "01JELSEWHERE", "--no-browser"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stderr, "");
    assert_eq!(
        again.stdout,
        format!("http://127.0.0.1:{port}/?session=01JELSEWHERE\n")
    );
    let ambiguous = dev.evi(&["sessions", "open", "01JWEBLONG", "--no-browser"]);
    assert_eq!(ambiguous.code, 1);
    assert!(
        ambiguous
            .stderr
            .starts_with("error: `01JWEBLONG` matches 2 sessions:")
    );
}
