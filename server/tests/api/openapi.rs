//! The OpenAPI document says what the server does: every answer it gives
//! is listed for its operation, and every format rule it enforces on a
//! field is the field's schema. Each answer below is provoked for real.

use std::io::Write as _;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer, kid};

async fn document(srv: &TestServer) -> Value {
    srv.anon().get("/api/v1/openapi.json").await.1
}

/// The statuses the document lists for `method path`.
fn listed(doc: &Value, method: &str, path: &str) -> Vec<String> {
    doc["paths"][path][method.to_ascii_lowercase()]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("no operation {method} {path}"))
        .keys()
        .cloned()
        .collect()
}

/// A request as sent: method, path as documented, path as sent, content
/// type and body.
struct Case {
    method: Method,
    template: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    token: bool,
}

fn case(method: Method, template: &'static str, path: impl Into<String>) -> Case {
    Case {
        method,
        template,
        path: path.into(),
        content_type: None,
        body: Vec::new(),
        token: true,
    }
}

impl Case {
    fn typed(mut self, ct: &'static str, body: impl Into<Vec<u8>>) -> Self {
        self.content_type = Some(ct);
        self.body = body.into();
        self
    }
    fn json(self, v: Value) -> Self {
        self.typed("application/json", serde_json::to_vec(&v).unwrap())
    }
    fn anonymous(mut self) -> Self {
        self.token = false;
        self
    }
}

#[tokio::test]
async fn every_answer_the_server_gives_is_listed_for_its_operation() {
    let srv = TestServer::start(&[]);
    let doc = document(&srv).await;
    let a = srv.register("doc").await;
    let blob = format!("/api/v1/blobs/{}", kid(4, 1));
    let big = vec![b' '; (1 << 20) + 10_000];
    let login = json!({"user": "doc", "password": "wrong-password", "device": "d"});
    let cases = vec![
        case(Method::GET, "/api/v1/blobs/{name}", &blob).anonymous(),
        case(Method::PUT, "/api/v1/blobs/{name}", &blob).anonymous(),
        case(Method::POST, "/api/v1/login", "/api/v1/login").typed("text/plain", "{}"),
        case(Method::POST, "/api/v1/login", "/api/v1/login").typed("application/json", "{"),
        case(Method::POST, "/api/v1/login", "/api/v1/login")
            .json(json!({"user": "no spaces", "password": PASSWORD, "device": "d"})),
        case(Method::POST, "/api/v1/login", "/api/v1/login").typed("application/json", big.clone()),
        case(Method::POST, "/api/v1/login", "/api/v1/login")
            .json(login)
            .anonymous(),
        case(Method::POST, "/api/v1/register", "/api/v1/register").typed("text/plain", "{}"),
        case(Method::POST, "/api/v1/register", "/api/v1/register")
            .typed("application/json", big.clone()),
        case(Method::POST, "/api/v1/password", "/api/v1/password").typed("text/plain", "{}"),
        case(Method::POST, "/api/v1/password", "/api/v1/password").typed("application/json", "[]"),
        case(Method::PUT, "/api/v1/key-check", "/api/v1/key-check").typed("text/plain", "{}"),
        case(Method::PUT, "/api/v1/key-check", "/api/v1/key-check").typed("application/json", "{}"),
        case(
            Method::POST,
            "/api/v1/blobs/missing",
            "/api/v1/blobs/missing",
        )
        .typed("text/plain", "{}"),
        case(
            Method::POST,
            "/api/v1/blobs/missing",
            "/api/v1/blobs/missing",
        )
        .typed("application/json", big.clone()),
        case(Method::POST, "/api/v1/blobs/purge", "/api/v1/blobs/purge")
            .typed("application/json", "{\"names\": 1}"),
        case(Method::POST, "/api/v1/records", "/api/v1/records").typed("text/plain", "{}"),
        case(
            Method::GET,
            "/api/v1/records",
            "/api/v1/records?limit=4294967296",
        ),
        case(
            Method::GET,
            "/api/v1/records",
            "/api/v1/records?after=9223372036854775808",
        ),
        case(Method::GET, "/api/v1/records", "/api/v1/records?stream=x"),
        case(
            Method::GET,
            "/api/v1/records/wait",
            "/api/v1/records/wait?after=x",
        ),
        case(
            Method::GET,
            "/api/v1/records/wait",
            "/api/v1/records/wait?timeout=1",
        ),
        case(Method::GET, "/api/v1/records/wait", "/api/v1/records/wait").anonymous(),
        case(Method::GET, "/api/v1/status", "/api/v1/status?after=x"),
        case(Method::GET, "/api/v1/key-check", "/api/v1/key-check").anonymous(),
        case(Method::POST, "/api/v1/pair", "/api/v1/pair").json(json!({"offer": ""})),
        case(Method::POST, "/api/v1/pair", "/api/v1/pair")
            .json(json!({"offer": "AA=="}))
            .anonymous(),
        case(Method::GET, "/api/v1/pair/{slot}", "/api/v1/pair/0"),
        case(Method::GET, "/api/v1/pair/{slot}", "/api/v1/pair/999999"),
        case(
            Method::POST,
            "/api/v1/pair/{slot}/join",
            "/api/v1/pair/1/join",
        )
        .typed("text/plain", "{}"),
        case(
            Method::POST,
            "/api/v1/pair/{slot}/join",
            "/api/v1/pair/999999/join",
        )
        .json(json!({"hello": "AA=="})),
        case(
            Method::GET,
            "/api/v1/pair/{slot}/wait",
            "/api/v1/pair/1/wait?state=open",
        )
        .anonymous(),
        case(
            Method::GET,
            "/api/v1/pair/{slot}/wait",
            "/api/v1/pair/1/wait?state=nope",
        ),
        case(
            Method::GET,
            "/api/v1/pair/{slot}/wait",
            "/api/v1/pair/999999/wait?state=open",
        ),
        case(
            Method::POST,
            "/api/v1/pair/{slot}/device",
            "/api/v1/pair/999999/device",
        )
        .json(json!({"device": "phone"})),
        case(
            Method::POST,
            "/api/v1/pair/{slot}/reply",
            "/api/v1/pair/999999/reply",
        )
        .json(json!({"reply": "AA=="})),
        case(Method::DELETE, "/api/v1/pair/{slot}", "/api/v1/pair/999999"),
        case(Method::DELETE, "/api/v1/pair/{slot}", "/api/v1/pair/1").anonymous(),
    ];
    let mut missing = Vec::new();
    for c in cases {
        let mut req = a
            .http
            .request(c.method.clone(), srv.url(&c.path))
            .body(c.body);
        if c.token {
            req = req.bearer_auth(a.token.as_deref().unwrap());
        }
        if let Some(ct) = c.content_type {
            req = req.header("content-type", ct);
        }
        let st = req.send().await.unwrap().status();
        let have = listed(&doc, c.method.as_str(), c.template);
        if !have.contains(&st.as_u16().to_string()) {
            missing.push(format!(
                "{} {} answered {st}, listed {have:?}",
                c.method, c.path
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "answers the document does not list:\n{}",
        missing.join("\n")
    );
}

#[tokio::test]
async fn answers_of_the_timeouts_and_the_public_url_are_listed() {
    let srv = TestServer::start(&["--body-timeout", "1", "--public-url", "https://doc.example"]);
    let doc = document_as(&srv, "doc.example").await;
    // Another host: 421, on every operation but the health check.
    let resp = crate::common::http()
        .get(srv.url("/api/v1/capabilities"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let has = op["responses"].get("421").is_some();
            assert_eq!(has, path != "/healthz", "421 of {method} {path}");
        }
    }
    // A body that stops: 408.
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    write!(
        s,
        "POST /api/v1/login HTTP/1.1\r\nHost: doc.example\r\nContent-Type: application/json\r\n\
         Content-Length: 10\r\nConnection: close\r\n\r\n{{"
    )
    .unwrap();
    let reply = tokio::task::spawn_blocking(move || {
        let mut r = String::new();
        std::io::Read::read_to_string(&mut s, &mut r).unwrap();
        r
    })
    .await
    .unwrap();
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(listed(&doc, "POST", "/api/v1/login").contains(&"408".to_owned()));
}

async fn document_as(srv: &TestServer, host: &str) -> Value {
    crate::common::http()
        .get(srv.url("/api/v1/openapi.json"))
        .header("host", host)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The schema `s` names, following one `$ref`.
fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
    match s["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
        None => s,
    }
}

fn param<'a>(doc: &'a Value, method: &str, path: &str, name: &str) -> &'a Value {
    let p = doc["paths"][path][method]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no parameter {name} of {method} {path}"));
    resolve(doc, &p["schema"])
}

#[tokio::test]
async fn the_format_rules_the_server_enforces_are_in_the_schemas() {
    let srv = TestServer::start(&[]);
    let doc = document(&srv).await;
    let schemas = &doc["components"]["schemas"];
    for (schema, field, pattern) in [
        ("Segment", "kind", "^[a-z0-9_-]{1,32}$"),
        ("Record", "kind", "^[a-z0-9_-]{1,32}$"),
        ("RegisterRequest", "user", "^[A-Za-z0-9._-]{1,64}$"),
        ("LoginRequest", "user", "^[A-Za-z0-9._-]{1,64}$"),
    ] {
        assert_eq!(
            schemas[schema]["properties"][field]["pattern"], pattern,
            "{schema}.{field}"
        );
    }
    for method in ["get", "put"] {
        assert_eq!(
            param(&doc, method, "/api/v1/blobs/{name}", "name")["pattern"],
            "^[0-9a-f]{64}$",
            "{method} /api/v1/blobs/{{name}}"
        );
    }
    assert_eq!(
        param(&doc, "get", "/api/v1/records", "stream")["pattern"],
        "^[0-9a-f]{64}$"
    );
    let limit = param(&doc, "get", "/api/v1/records", "limit");
    assert_eq!(
        (&limit["minimum"], &limit["maximum"]),
        (&json!(0), &json!(4_294_967_295u64)),
        "{limit}"
    );
    for (path, name) in [
        ("/api/v1/records", "after"),
        ("/api/v1/status", "after"),
        ("/api/v1/records/wait", "after"),
    ] {
        let p = param(&doc, "get", path, name);
        assert_eq!(p["maximum"], json!(i64::MAX), "{path} {name}: {p}");
    }
    // And the server keeps to them: the largest limit is taken, one past
    // it and a cursor past the largest seq are not.
    let a = srv.register("rules").await;
    let (st, _) = a.get("/api/v1/records?limit=4294967295").await;
    assert_eq!(st, StatusCode::OK);
    for q in ["limit=4294967296", "after=9223372036854775808"] {
        let (st, v) = a.get(&format!("/api/v1/records?{q}")).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{q}: {v}");
    }
    let (st, v) = a.get("/api/v1/status?after=9223372036854775808").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}
