//! `evi web` over plain HTTP: the API answers what the CLI's `--json` says,
//! in the same shapes; ids resolve as in the CLI; every answer carries the
//! safety headers; off loopback nothing is served without the token; the
//! pull button's POST needs this origin and the page's CSRF token, and pulls
//! a session that is only on the server; browsing writes nothing.

use reqwest::StatusCode;
use reqwest::blocking::Response;
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

/// `GET path` of the viewer.
pub(crate) fn get(web: &WebViewer, path: &str) -> Response {
    crate::common::http()
        .get(format!("{}{path}", web.base))
        .send()
        .expect("GET the viewer")
}

/// An answer's JSON body (its content type JSON).
pub(crate) fn json(resp: Response) -> Value {
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
    let rebound = crate::common::http()
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
    let client = crate::common::http();
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
    let mut req = crate::common::http()
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
    let page = crate::common::http()
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

// ---------------------------------------------------------------------------
// Full-text search: the engine of `evi sessions search`, over HTTP.

const SEARCHED: &str = "01JWEBSEARCHED000000000000";
const S_USER: &str = r#"{"role":"user","content":"please fix the auth middleware, it drops tokens","ts":"2026-06-08T10:00:00Z"}"#;
const S_ASSISTANT: &str = r#"{"role":"assistant","content":"The middleware reads the wrong header.","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"grep -rn bearer src\"}"}}],"ts":"2026-06-08T10:00:05Z"}"#;
const S_TOOL: &str = r#"{"role":"tool","tool_call_id":"c1","tool_name":"bash","content":"src/auth.rs:12: let token = header(\"x-zanzibar\");","ts":"2026-06-08T10:00:06Z"}"#;

/// `GET /api/search` with `query`.
pub(crate) fn search_api(web: &WebViewer, query: &[(&str, &str)]) -> Response {
    crate::common::http()
        .get(format!("{}/api/search", web.base))
        .query(query)
        .send()
        .expect("GET /api/search")
}

/// (session, entry, role) of each hit of a search answer.
fn hit_rows(v: &Value) -> Vec<(String, String, String)> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
            (s("session"), s("entry"), s("role"))
        })
        .collect()
}

#[test]
fn search_finds_user_assistant_and_tool_lines_as_the_cli_does() {
    let dev = Device::new();
    dev.write(
        "2026-06-08",
        SEARCHED,
        &lines(&[S_USER.into(), S_ASSISTANT.into(), S_TOOL.into()]),
    );
    let web = dev.web("127.0.0.1:0");
    let ids: Vec<String> = cli_json(&dev, &["sessions", "show", SEARCHED, "--json"])["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    for (q, entry, role) in [
        ("drops tokens", 0, "user"),
        ("bearer", 1, "assistant"),
        ("zanzibar", 2, "tool"),
    ] {
        let v = json(search_api(&web, &[("q", q)]));
        assert_eq!(
            hit_rows(&v),
            [(SEARCHED.to_owned(), ids[entry].clone(), role.to_owned())],
            "{q}"
        );
        let hit = &v["hits"][0];
        assert_eq!(
            hit["title"],
            "please fix the auth middleware, it drops tokens"
        );
        assert_eq!(hit["short_id"], &SEARCHED[..8]);
        // The same hit, snippet and all, as `evi sessions search --json`.
        let cli = cli_json(&dev, &["sessions", "search", "--json", q]);
        for k in ["session", "entry", "role", "ts", "day", "snippet"] {
            assert_eq!(hit[k], cli["hits"][0][k], "{q}: {k}");
        }
        let marked: Vec<&str> = hit["snippet"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["match"] == true)
            .map(|p| p["text"].as_str().unwrap())
            .collect();
        assert_eq!(marked.join(" "), q, "{q}: the match is marked");
    }
    // Words everywhere, narrowed by role; a phrase only in order.
    let all = json(search_api(&web, &[("q", "middleware")]));
    assert_eq!(hit_rows(&all).len(), 2);
    let only = json(search_api(
        &web,
        &[("q", "middleware"), ("role", "assistant")],
    ));
    assert_eq!(hit_rows(&only)[0].1, ids[1]);
    assert_eq!(hit_rows(&only).len(), 1);
    let none = json(search_api(&web, &[("q", "\"middleware auth\"")]));
    assert_eq!(hit_rows(&none).len(), 0);
    let recent = json(search_api(&web, &[("q", "middleware"), ("days", "7")]));
    assert_eq!(hit_rows(&recent).len(), 0, "2026-06-08 is not this week");

    // A hit's link opens the page that holds its entry.
    let page = json(get(
        &web,
        &format!("/api/sessions/{SEARCHED}?entry={}&limit=2", ids[2]),
    ));
    assert_eq!(page["offset"], 2);
    assert_eq!(page["messages"][0]["id"], ids[2].as_str());
}

#[test]
fn hostile_searches_are_clear_json_errors_or_literal() {
    let dev = Device::new();
    dev.write(
        "2026-06-08",
        SEARCHED,
        &lines(&[
            S_USER.into(),
            r#"{"role":"user","content":"near a and b, body x","ts":"2026-06-08T10:01:00Z"}"#
                .into(),
        ]),
    );
    let web = dev.web("127.0.0.1:0");
    let long = "a ".repeat(600);
    for (q, message) in [
        (
            "",
            "the query has no word to search for (only punctuation or spaces)",
        ),
        (
            "* \" ( ) ^ :",
            "the query has no word to search for (only punctuation or spaces)",
        ),
        (
            long.as_str(),
            "the query is 1200 bytes long; at most 1000 are searched",
        ),
    ] {
        let resp = search_api(&web, &[("q", q)]);
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{q:.20}");
        let body = json(resp);
        assert_eq!(body["code"], "bad_query");
        assert_eq!(body["message"], message);
        assert!(body["hint"].as_str().unwrap().contains("quoted phrases"));
    }
    // FTS5 syntax searches for its own words.
    for q in [
        "NEAR(a b)",
        "a AND b",
        "body:x*",
        "\"a and b",
        "a OR nothing",
    ] {
        let resp = search_api(&web, &[("q", q)]);
        assert_eq!(resp.status(), StatusCode::OK, "{q}");
        let hits = hit_rows(&json(resp));
        let want = usize::from(!q.contains("nothing"));
        assert_eq!(hits.len(), want, "{q}: {hits:?}");
    }
    let resp = search_api(&web, &[("q", "auth"), ("role", "admin")]);
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body = json(resp);
    assert_eq!(body["message"], "unknown role `admin`");
    let resp = search_api(&web, &[("q", "auth"), ("days", "soon")]);
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json(resp)["code"], "bad_request");
    // Still serving.
    assert_eq!(hit_rows(&json(search_api(&web, &[("q", "auth")]))).len(), 1);
}

#[test]
fn search_finds_another_devices_branch_after_a_pull() {
    let (_server, a, b) = crate::common::two_devices();
    let day = "2026-06-08";
    a.write(day, SEARCHED, &lines(&[S_USER.into(), S_ASSISTANT.into()]));
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let web = b.web("127.0.0.1:0");
    // The index exists before the branch arrives.
    assert_eq!(
        hit_rows(&json(search_api(&web, &[("q", "header")]))).len(),
        1
    );
    let laptop =
        r#"{"role":"user","content":"written on the laptop: quokka","ts":"2026-06-08T12:00:00Z"}"#;
    let desktop =
        r#"{"role":"user","content":"written on the desktop","ts":"2026-06-08T11:00:00Z"}"#;
    a.write(
        day,
        SEARCHED,
        &lines(&[S_USER.into(), S_ASSISTANT.into(), laptop.into()]),
    );
    b.write(
        day,
        SEARCHED,
        &lines(&[S_USER.into(), S_ASSISTANT.into(), desktop.into()]),
    );
    a.sync_ok(&["push"]);
    b.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    let on_a = cli_json(&a, &["sessions", "show", SEARCHED, "--json"]);
    let id = on_a["messages"][2]["id"].as_str().unwrap().to_owned();
    let v = json(search_api(&web, &[("q", "quokka")]));
    assert_eq!(
        hit_rows(&v),
        [(SEARCHED.to_owned(), id.clone(), "user".to_owned())],
        "the laptop's line, under the laptop's id"
    );
    // Its link opens the laptop's branch on the desktop.
    let page = json(get(&web, &format!("/api/sessions/{SEARCHED}?entry={id}")));
    assert_eq!(page["leaf"], id.as_str());
    let texts: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.contains(&"written on the laptop: quokka"),
        "{texts:?}"
    );
    assert!(!texts.contains(&"written on the desktop"), "{texts:?}");
}

// ---------------------------------------------------------------------------
// The rewind dialog's API: `evi rewind SEQ`, behind the pull button's guard.

/// A session from 10:00:00 to 10:00:06 and a project whose files eVi wrote
/// in that span (seqs 1-5) and once after it (seq 6, at 11:30).
pub struct Rewound {
    pub dev: Device,
}

pub const SPANNED: &str = "01JWEBREWOUND0000000000000";

impl Rewound {
    pub fn new() -> Self {
        Self::new_in(Device::new())
    }

    pub fn new_in(dev: Device) -> Self {
        dev.write(
            "2026-06-08",
            SPANNED,
            &lines(&[S_USER.into(), S_ASSISTANT.into(), S_TOOL.into()]),
        );
        std::fs::create_dir_all(dev.dir.path().join("proj")).unwrap();
        let r = Self { dev };
        let mut journal = String::new();
        journal += &r.modify(1, "10:00:01", "app.py", "app v0\n", "app v1\n");
        journal += &r.create(2, "10:00:02", "new.py", "brand new\n");
        journal += &r.modify(3, "10:00:03", "app.py", "app v1\n", "app v2\n");
        journal += &format!(
            "{{\"seq\":4,\"ts\":\"2026-06-08T10:00:04Z\",\"path\":\"{}\",\"op\":\"skip\",\"size\":6291456}}\n",
            r.shown("data.bin")
        );
        std::fs::write(r.path("data.bin"), "huge v1\n").unwrap();
        journal += &r.modify(5, "10:00:05", "util.py", "util v0\n", "util v1\n");
        journal += &r.modify(6, "11:30:00", "late.py", "late v0\n", "late v1\n");
        r.dev.put("checkpoints/journal.jsonl", journal.as_bytes());
        r
    }

    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dev.dir.path().join("proj").join(rel)
    }

    pub fn shown(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    pub fn modify(&self, seq: u32, at: &str, rel: &str, before: &str, after: &str) -> String {
        let sha = crate::common::sha256_hex(before.as_bytes());
        self.dev
            .put(&format!("checkpoints/blobs/{sha}"), before.as_bytes());
        std::fs::write(self.path(rel), after).unwrap();
        format!(
            "{{\"seq\":{seq},\"ts\":\"2026-06-08T{at}Z\",\"path\":\"{}\",\"op\":\"modify\",\"blob\":\"{sha}\",\"size\":{}}}\n",
            self.shown(rel),
            before.len()
        )
    }

    pub fn create(&self, seq: u32, at: &str, rel: &str, bytes: &str) -> String {
        std::fs::write(self.path(rel), bytes).unwrap();
        format!(
            "{{\"seq\":{seq},\"ts\":\"2026-06-08T{at}Z\",\"path\":\"{}\",\"op\":\"create\"}}\n",
            self.shown(rel)
        )
    }

    /// The project's files and the journal, with this device's folder
    /// written as `P`: what two devices rewound alike have alike.
    pub fn state(&self) -> (crate::common::Tree, String) {
        let journal =
            std::fs::read_to_string(self.dev.home().join("checkpoints/journal.jsonl")).unwrap();
        (
            crate::common::tree(&self.path("")),
            journal.replace(&self.shown(""), "P/"),
        )
    }
}

fn post_rewind(web: &WebViewer, origin: Option<&str>, csrf: Option<&str>, body: Value) -> Response {
    let mut req = crate::common::http()
        .post(format!("{}/api/rewind", web.base))
        .json(&body);
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    if let Some(c) = csrf {
        req = req.header("X-Evi-Csrf", c);
    }
    req.send().unwrap()
}

#[test]
fn rewind_lists_the_sessions_checkpoints_and_plans_what_evi_rewind_would_do() {
    let (_server, laptop, desk) = crate::common::two_devices();
    // The laptop's journal, pulled to the desk: one write in the span.
    let (line, _) = crate::sync_journal::checkpoint(&laptop, 3, "/home/pat/x.rs", "x v0\n");
    laptop.put("checkpoints/journal.jsonl", line.as_bytes());
    laptop.sync_ok(&["push"]);
    let r = Rewound::new_in(desk);
    r.dev.sync_ok(&["pull"]);
    let web = r.dev.web("127.0.0.1:0");

    let listed = json(get(&web, &format!("/api/sessions/{SPANNED}/checkpoints")));
    assert_eq!(listed["span"]["start"], "2026-06-08T10:00:00.000Z");
    assert_eq!(listed["span"]["end"], "2026-06-08T10:00:06.000Z");
    let seqs: Vec<u64> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [5, 4, 3, 2, 1], "seq 6 was written after the session");
    assert_eq!(listed["total"], 6);
    assert_eq!(listed["checkpoints"][0]["undoes"], 2, "5 and the later 6");
    assert_eq!(
        listed["checkpoints"][1]["not_restorable"],
        "not snapshotted"
    );
    let devices = listed["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert!(devices[0]["name"].as_str().unwrap().starts_with("laptop-"));
    assert_eq!(devices[0]["checkpoints"][0]["path"], "/home/pat/x.rs");
    assert_eq!(devices[0]["checkpoints"][0].get("undoes"), None);

    // The plan is `evi rewind 3 --dry-run`, line for line.
    let plan = json(get(&web, "/api/rewind/plan?seq=3"));
    let dry = r.dev.evi(&["rewind", "3", "--dry-run"]);
    assert_eq!(dry.code, 1, "the skip cannot be undone: {}", dry.stderr);
    let said: Vec<String> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let path = s["path"].as_str().unwrap();
            match s["action"].as_str().unwrap() {
                "restore" => format!("would restore — {path}"),
                "delete" => format!("would delete (was newly created) — {path}"),
                "failed" => format!(
                    "✗ could not restore ({}) — {path}",
                    s["why"].as_str().unwrap()
                ),
                other => panic!("{other}"),
            }
        })
        .collect();
    assert_eq!(said, dry.stdout.lines().collect::<Vec<_>>());
    assert_eq!(said.len(), 4, "6, 5, 4 and 3: {said:?}");
    assert_eq!(plan["undone"], 3);
    assert_eq!(plan["failed"], 1);
    assert_eq!(plan["left"], 6);
    assert_eq!(plan["digest"].as_str().unwrap().len(), 64);
    let missing = get(&web, "/api/rewind/plan?seq=99");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body = json(missing);
    assert_eq!(body["code"], "no_checkpoint");
    assert_eq!(
        body["message"],
        "no checkpoint has seq 99 or later (the latest is 6)"
    );
}

#[test]
fn rewind_post_needs_the_guard_and_the_plan_then_does_what_the_cli_does() {
    let web_side = Rewound::new();
    let cli_side = Rewound::new();
    let web = web_side.dev.web("127.0.0.1:0");
    let csrf = csrf_of(&web);
    let plan = json(get(&web, "/api/rewind/plan?seq=2"));
    let digest = plan["digest"].as_str().unwrap().to_owned();
    let body = serde_json::json!({ "seq": 2, "digest": digest });

    let before = web_side.state();
    let own = web.base.as_str();
    for (origin, token, why) in [
        (None, Some(csrf.as_str()), "no Origin"),
        (
            Some("http://evil.example"),
            Some(csrf.as_str()),
            "another origin",
        ),
        (Some("null"), Some(csrf.as_str()), "an opaque origin"),
        (Some(own), None, "no CSRF token"),
        (Some(own), Some("0000"), "a wrong CSRF token"),
    ] {
        let resp = post_rewind(&web, origin, token, body.clone());
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{why}");
        assert_eq!(json(resp)["code"], "csrf", "{why}");
    }
    assert_eq!(web_side.state(), before, "a refused POST changed something");

    // The journal changes after the plan: refused, planned anew.
    let extra = web_side.modify(7, "12:00:00", "later.py", "later v0\n", "later v1\n");
    web_side
        .dev
        .append("checkpoints/journal.jsonl", extra.as_bytes());
    cli_side.dev.append(
        "checkpoints/journal.jsonl",
        cli_side
            .modify(7, "12:00:00", "later.py", "later v0\n", "later v1\n")
            .as_bytes(),
    );
    let before = web_side.state();
    let resp = post_rewind(&web, Some(own), Some(&csrf), body);
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let refused = json(resp);
    assert_eq!(refused["code"], "plan_changed");
    assert_eq!(
        refused["message"],
        "the checkpoint journal changed since the plan was made (it now picks 6 writes to \
         undo): nothing was undone"
    );
    assert_eq!(refused["plan"]["steps"].as_array().unwrap().len(), 6);
    assert_eq!(refused["plan"]["steps"][0]["seq"], 7);
    assert_eq!(web_side.state(), before, "a refused plan changed something");

    // Confirmed on the new plan: the same files and journal as the CLI's.
    let again = serde_json::json!({ "seq": 2, "digest": refused["plan"]["digest"] });
    let resp = post_rewind(&web, Some(own), Some(&csrf), again);
    assert_eq!(resp.status(), StatusCode::OK);
    let done = json(resp);
    let actions: Vec<&str> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "restored", "restored", "restored", "failed", "restored", "deleted"
        ]
    );
    assert_eq!(done["undone"], 5);
    assert_eq!(done["left"], 1);
    let cli = cli_side.dev.evi(&["rewind", "--yes", "2"]);
    assert_eq!(cli.code, 1, "the skip: {}", cli.stderr);
    assert_eq!(web_side.state(), cli_side.state());
    let read = |r: &Rewound, f: &str| std::fs::read_to_string(r.path(f)).ok();
    assert_eq!(read(&web_side, "app.py").as_deref(), Some("app v1\n"));
    assert_eq!(read(&web_side, "util.py").as_deref(), Some("util v0\n"));
    assert_eq!(read(&web_side, "later.py").as_deref(), Some("later v0\n"));
    assert_eq!(read(&web_side, "new.py"), None, "eVi created it");
    assert_eq!(read(&web_side, "data.bin").as_deref(), Some("huge v1\n"));
    // A confirm of a plan already carried out finds its writes gone.
    let stale = post_rewind(
        &web,
        Some(own),
        Some(&csrf),
        serde_json::json!({ "seq": 2, "digest": refused["plan"]["digest"] }),
    );
    assert_eq!(stale.status(), StatusCode::NOT_FOUND);
    assert_eq!(json(stale)["code"], "no_checkpoint");
}

/// Sets `path`'s modification time to `at` (RFC 3339): when an agent last
/// wrote it.
fn written_at(path: &std::path::Path, at: &str) {
    let t = chrono::DateTime::parse_from_rfc3339(at).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t.into())
        .unwrap();
}

fn ids_of(listing: &Value) -> Vec<String> {
    listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_list_shows_every_agents_sessions_as_the_cli_lists_them_and_opens_them() {
    use crate::agents::{
        CLAUDE_ID, CODEX_ID, CODEX_REL, CODEX_TOOLS_ID, CODEX_TOOLS_REL, SECRETS, SUB_STEM,
        TOOLS_ID, claude_session, codex, enable, fixture, project, put,
    };
    let dev = Device::new();
    enable(&dev, "");
    let proj = project(&dev, "work/zebra-app");
    // Written by each agent a little after its last message, so that the
    // newest file holds the newest session (eVi's day files the same).
    let evi = dev.write(
        "2026-02-05",
        "01JWEBAGENTS00000000000000",
        &lines(&[
            r#"{"role":"user","content":"tidy the lexer docs","ts":"2026-02-05T08:00:00Z"}"#.into(),
        ]),
    );
    written_at(&evi, "2026-02-05T08:00:01Z");
    let tools = claude_session(&dev, &proj, TOOLS_ID);
    put(&tools, &fixture("claude-code-tools.jsonl", &proj));
    written_at(&tools, "2026-02-04T10:00:00Z");
    let sub = tools
        .parent()
        .unwrap()
        .join(format!("{TOOLS_ID}/subagents/{SUB_STEM}.jsonl"));
    put(&sub, &fixture("claude-code-subagent.jsonl", &proj));
    written_at(&sub, "2026-02-04T10:00:00Z");
    let plain = claude_session(&dev, &proj, CLAUDE_ID);
    put(&plain, &fixture("claude-code.jsonl", &proj));
    written_at(&plain, "2026-02-03T19:00:00Z");
    let cx_tools = codex(&dev).join(CODEX_TOOLS_REL);
    put(&cx_tools, &fixture("codex-tools.jsonl", &proj));
    written_at(&cx_tools, "2026-01-20T11:00:00Z");
    let cx = codex(&dev).join(CODEX_REL);
    put(&cx, &fixture("codex-rollout.jsonl", &proj));
    written_at(&cx, "2026-01-19T16:00:00Z");
    let web = dev.web("127.0.0.1:0");

    // Every agent's sessions, newest first, row for row what
    // `sessions list --json` prints (agent and project included); a
    // subagent's transcript is part of its session, not a row.
    let listing = json(get(&web, "/api/sessions"));
    let cli = cli_json(
        &dev,
        &[
            "sessions", "list", "--json", "--days", "36500", "--limit", "50",
        ],
    );
    assert_eq!(listing["sessions"], cli["sessions"]);
    assert_eq!(
        ids_of(&listing),
        [
            "01JWEBAGENTS00000000000000",
            TOOLS_ID,
            CLAUDE_ID,
            CODEX_TOOLS_ID,
            CODEX_ID
        ]
    );
    assert_eq!(listing["total"], 5);
    assert_eq!(
        listing["agents"],
        serde_json::json!(["evi", "claude-code", "codex", "gemini"])
    );
    let tools_row = &listing["sessions"][1];
    assert_eq!(tools_row["agent"], "claude-code");
    assert_eq!(tools_row["project"], proj.as_str());
    assert_eq!(tools_row["title"], "Lexer off-by-one fix");
    assert_eq!(listing["sessions"][0]["agent"], "evi");
    assert_eq!(listing["sessions"][3]["agent"], "codex");
    assert_eq!(listing["sessions"][3]["project"], proj.as_str());

    // Pages run across agents.
    let page = json(get(&web, "/api/sessions?offset=2&limit=2"));
    assert_eq!(ids_of(&page), [CLAUDE_ID, CODEX_TOOLS_ID]);
    assert_eq!(page["next_offset"], 4);
    assert_eq!(page["total"], 5);

    // The agent filter, and the others filters over every agent: words
    // in the title, first message or project; a day with messages.
    let only = |q: &str| ids_of(&json(get(&web, &format!("/api/sessions?{q}"))));
    assert_eq!(only("agent=codex"), [CODEX_TOOLS_ID, CODEX_ID]);
    assert_eq!(only("agent=claude-code"), [TOOLS_ID, CLAUDE_ID]);
    assert_eq!(only("agent=evi"), ["01JWEBAGENTS00000000000000"]);
    assert_eq!(only("q=lexer"), ["01JWEBAGENTS00000000000000", TOOLS_ID]);
    assert_eq!(only("q=zebra&agent=codex"), [CODEX_TOOLS_ID, CODEX_ID]);
    assert_eq!(only("day=2026-02-04"), [TOOLS_ID]);
    assert_eq!(only("day=2026-02-05"), ["01JWEBAGENTS00000000000000"]);
    let bad = get(&web, "/api/sessions?agent=cursor");
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body = json(bad);
    assert_eq!(body["message"], "unknown agent `cursor`");

    // A listed session opens by what the page links it by (its stream
    // name), as `show --json` prints it.
    for row in listing["sessions"].as_array().unwrap() {
        let (agent, id) = (row["agent"].as_str().unwrap(), row["id"].as_str().unwrap());
        let open = match agent {
            "evi" => id.to_owned(),
            a => format!("{a}%2F{id}"),
        };
        let page = json(get(&web, &format!("/api/sessions/{open}?limit=500")));
        assert_eq!(page["session"], *row, "{open}");
        let shown = cli_json(&dev, &["sessions", "show", id, "--json"]);
        assert_eq!(page, shown, "{open}");
    }

    // The search box finds every agent's messages, and links a hit to
    // the session it opens.
    let search = |q: &[(&str, &str)]| json(search_api(&web, q));
    let r = search(&[("q", "emit")]);
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{r}");
    assert_eq!(hits[0]["agent"], "claude-code");
    assert_eq!(hits[0]["session"], TOOLS_ID);
    assert_eq!(hits[0]["open"], format!("claude-code/{TOOLS_ID}"));
    assert_eq!(hits[0]["title"], "Lexer off-by-one fix");
    assert_eq!(hits[0]["role"], "tool");
    // Both Claude Code sessions think it; a Codex one does not.
    let r = search(&[("q", "bound")]);
    let sessions: std::collections::BTreeSet<&str> = r["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, [TOOLS_ID, CLAUDE_ID].into_iter().collect());
    let r = search(&[("q", "file1"), ("agent", "codex")]);
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{r}");
    assert!(hits.iter().all(|h| h["session"] == CODEX_TOOLS_ID), "{r}");
    assert_eq!(hits[0]["title"], "List the files");
    let r = search(&[("q", "bound"), ("agent", "codex")]);
    assert_eq!(r["hits"], serde_json::json!([]));
    let r = search(&[("q", "parse_expr")]);
    assert_eq!(
        r["hits"][0]["open"],
        format!("claude-code/{TOOLS_ID}/{SUB_STEM}")
    );
    for secret in SECRETS {
        let r = search(&[("q", secret.trim_end_matches('='))]);
        assert_eq!(r["hits"], serde_json::json!([]), "{secret}");
    }
    let bad = search_api(&web, &[("q", "bound"), ("agent", "cursor")]);
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

/// `[agents]` turned on (or off) while the viewer runs: its list follows
/// config.toml at the next request, no restart.
#[test]
fn a_running_viewer_follows_agents_turned_on_and_off_in_the_config() {
    use crate::agents::{
        CLAUDE_ID, CODEX_ID, CODEX_REL, claude_session, codex, enable, fixture, project, put,
    };
    let dev = Device::new();
    let proj = project(&dev, "work/app");
    put(
        &claude_session(&dev, &proj, CLAUDE_ID),
        &fixture("claude-code.jsonl", &proj),
    );
    put(
        &codex(&dev).join(CODEX_REL),
        &fixture("codex-rollout.jsonl", &proj),
    );
    let web = dev.web("127.0.0.1:0");
    let listing = json(get(&web, "/api/sessions"));
    assert_eq!(listing["total"], 0, "{listing}");
    assert_eq!(listing["agents"], serde_json::json!(["evi"]));

    enable(&dev, "");
    let listing = json(get(&web, "/api/sessions"));
    let mut ids = ids_of(&listing);
    ids.sort();
    assert_eq!(ids, [CODEX_ID, CLAUDE_ID], "{listing}");
    assert_eq!(
        listing["agents"],
        serde_json::json!(["evi", "claude-code", "codex", "gemini"])
    );
    let page = get(&web, &format!("/api/sessions/claude-code%2F{CLAUDE_ID}"));
    assert_eq!(page.status(), StatusCode::OK);

    dev.write_config(&format!(
        "[agents]\ncodex = true\ncodex-dir = \"{}\"\n",
        codex(&dev).display()
    ));
    let listing = json(get(&web, "/api/sessions"));
    assert_eq!(ids_of(&listing), [CODEX_ID], "{listing}");
    let page = get(&web, &format!("/api/sessions/claude-code%2F{CLAUDE_ID}"));
    assert_eq!(page.status(), StatusCode::NOT_FOUND);
}
