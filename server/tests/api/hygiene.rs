//! What the server leaves on disk and says back: a data folder only its
//! user can read, device names that show what they are, every error in the
//! `{code, message}` shape, and messages that never repeat bulk input.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer, kid, raw_http, segment};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every folder and file of the data folder with its mode.
fn modes(data: &Path) -> Vec<(String, u32)> {
    let mut out = vec![(".".to_owned(), mode(data))];
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(data).unwrap().display().to_string();
            out.push((rel, mode(&p)));
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

async fn fill(srv: &TestServer) {
    let a = srv.register("owner").await;
    a.push(vec![segment(1, 1, 100)]).await;
    assert_eq!(
        a.put_blob(&kid(4, 1), vec![1; 10]).await.0,
        StatusCode::CREATED
    );
}

fn assert_private(data: &Path) {
    let all = modes(data);
    if crate::backend() == crate::common::Backend::Postgres {
        // A replica on Postgres and a bucket keeps no database, record body
        // or blob on its disk (issue 22, stateless replicas); what it does
        // keep there is private all the same.
        assert!(
            all.iter().all(|(p, _)| !p.starts_with("evi-server.sqlite3")
                && !p.starts_with("bodies")
                && !p.starts_with("blobs")),
            "{all:?}"
        );
    } else {
        assert!(
            all.iter().any(|(p, _)| p == "evi-server.sqlite3"),
            "{all:?}"
        );
    }
    for (p, m) in &all {
        let is_dir = data.join(p).is_dir();
        let ok = if is_dir { *m == 0o700 } else { *m == 0o600 };
        assert!(ok, "{p} is {m:o}");
    }
}

#[tokio::test]
async fn the_data_folder_is_readable_by_its_user_only() {
    let srv = TestServer::start(&[]);
    fill(&srv).await;
    assert_private(&srv.data());
}

#[tokio::test]
async fn a_data_folder_left_open_is_closed_at_start() {
    let mut srv = TestServer::start(&[]);
    fill(&srv).await;
    srv.stop();
    let data = srv.data();
    // As an older server left it: folders 0755, the database files 0644
    // (blob and pack files were always 0600).
    for (p, _) in modes(&data) {
        let path = data.join(&p);
        let m = if path.is_dir() {
            0o755
        } else if p.starts_with("evi-server.sqlite3") {
            0o644
        } else {
            continue;
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
    }
    srv.start_again();
    let a = srv.anon();
    let (st, _) = a
        .post(
            "/api/v1/login",
            json!({"user": "owner", "password": PASSWORD, "device": "again"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_private(&data);
}

#[tokio::test]
async fn device_names_show_what_they_are() {
    let srv = TestServer::start(&["--auth-rate-per-user", "1000"]);
    srv.register("names").await;
    let anon = srv.anon();
    let login = |device: &str| {
        let anon = anon.clone();
        let device = device.to_owned();
        async move {
            anon.post(
                "/api/v1/login",
                json!({"user": "names", "password": PASSWORD, "device": device}),
            )
            .await
        }
    };
    for bad in [
        "\u{202E}kcatta",            // right-to-left override
        "lap\u{2066}top",            // left-to-right isolate
        "laptop\u{200F}",            // right-to-left mark
        "\u{200B}",                  // zero width space alone
        "\u{200B}\u{2060} \u{FEFF}", // nothing visible
        "\u{3164}",                  // Hangul filler
        "two\u{2028}lines",          // line separator
        "bell\u{7}",                 // control
    ] {
        let (st, v) = login(bad).await;
        assert_eq!(
            (st, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_request")),
            "{bad:?}: {v}"
        );
        // Register checks the same rule.
        let (st, _) = anon
            .post(
                "/api/v1/register",
                json!({"user": "other", "password": PASSWORD, "device": bad}),
            )
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad:?}");
    }
    for good in [
        "laptop",
        "Büro-PC",
        "laptop 💻",
        "👩\u{200D}💻 desk",
        "my\u{00A0}phone",
    ] {
        let (st, v) = login(good).await;
        assert_eq!(st, StatusCode::OK, "{good:?}: {v}");
        assert_eq!(v["device_name"], good);
    }
}

/// The status, the content type and the parsed body of a raw request.
fn raw(addr: &str, request: &str) -> (String, String, Value) {
    let reply = raw_http(addr, request.as_bytes(), true);
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.split(' ').nth(1).unwrap_or("").to_owned();
    let ct = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (
        status,
        ct,
        serde_json::from_str(body).unwrap_or(Value::String(body.into())),
    )
}

#[tokio::test]
async fn every_error_answers_the_json_shape() {
    let srv = TestServer::start(&[]);
    let a = srv.register("shape").await;
    let token = a.token.clone().unwrap();
    let cases = [
        // A method the path does not take.
        (
            "DELETE /api/v1/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
            "405",
            "method_not_allowed",
        ),
        (
            "PUT /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
                .to_owned(),
            "405",
            "method_not_allowed",
        ),
        // Paths that are not UTF-8.
        (
            format!(
                "GET /api/v1/blobs/%FF%FE HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
            "400",
            "invalid_id",
        ),
        (
            format!(
                "DELETE /api/v1/devices/%C3%28 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
            "400",
            "bad_request",
        ),
    ];
    for (req, status, code) in cases {
        let (st, ct, v) = raw(&srv.addr, &req);
        assert_eq!(
            (st.as_str(), v["code"].as_str()),
            (status, Some(code)),
            "{req}: {v}"
        );
        assert_eq!(ct, "application/json", "{req}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    let (st, _) = a.call(Method::DELETE, "/api/v1/login", None).await;
    assert_eq!(st, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn error_messages_do_not_repeat_bulk_input() {
    let srv = TestServer::start(&[]);
    let a = srv.register("echo").await;
    let long = "x".repeat(65_536);
    let mut bad_stream = segment(1, 1, 10);
    bad_stream["stream"] = json!(long);
    let mut bad_kind = segment(1, 2, 10);
    bad_kind["kind"] = json!(long);
    let mut bad_id = segment(1, 3, 10);
    bad_id["entry_ids"] = json!([long]);
    for seg in [bad_stream, bad_kind, bad_id] {
        let (st, v) = a.post("/api/v1/records", json!({"segments": [seg]})).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{}", &v.to_string()[..200]);
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.chars().count() <= 300,
            "a message of {} characters",
            msg.len()
        );
    }
    // In a path and in a header too.
    let (st, v) = a.get(&format!("/api/v1/blobs/{}", "a".repeat(8000))).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(
        v["message"].as_str().unwrap().chars().count() <= 300,
        "{}",
        v["message"].as_str().unwrap().len()
    );
    let resp = a
        .http
        .post(format!("{}/api/v1/blobs/missing", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .header("content-type", format!("text/{}", "y".repeat(6000)))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let v: Value = resp.json().await.unwrap();
    assert!(v["message"].as_str().unwrap().chars().count() <= 300, "{v}");
}
