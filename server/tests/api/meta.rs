//! Health, capabilities, OpenAPI, metrics, graceful shutdown.

use std::time::Duration;

use reqwest::StatusCode;

use crate::common::{TestServer, kid};

#[tokio::test]
async fn health_capabilities_openapi_and_metrics() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let srv = TestServer::start(&["--metrics-listen", &metrics, "--max-page-records", "7"]);
    let anon = srv.anon();
    let (st, v) = anon.get("/healthz").await;
    assert_eq!((st, v.as_str()), (StatusCode::OK, Some("ok")));
    let (st, v) = anon.get("/api/v1/capabilities").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["max_page_records"], 7);
    assert_eq!(v["registration"], "open");
    for k in ["max_batch_bytes", "max_blob_bytes", "max_page_bytes"] {
        assert!(v[k].as_u64().unwrap() > 0, "{k}");
    }
    let (st, v) = anon.get("/api/v1/openapi.json").await;
    assert_eq!(st, StatusCode::OK);
    for p in [
        "/api/v1/records",
        "/api/v1/blobs/{name}",
        "/api/v1/login",
        "/healthz",
    ] {
        assert!(v["paths"][p].is_object(), "{p} missing from OpenAPI");
    }
    assert!(v["components"]["schemas"]["PushRequest"].is_object());
    let (st, v) = anon.get("/api/v1/nope").await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );

    let text = crate::common::scrape(&metrics).await;
    assert!(text.contains("evi_server_http_requests_total"), "{text}");
    assert!(text.contains("route=\"/api/v1/capabilities\""), "{text}");
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_flight() {
    let mut srv = TestServer::start(&[]);
    let api = srv.register("grace").await;
    let token = api.token.clone().unwrap();
    let addr = srv.addr.clone();
    let name = kid(9, 1);
    // Start an upload, send half, then SIGTERM, then the rest.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read, Write};
    let half = vec![7u8; 50_000];
    write!(
        s,
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 100000\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    s.write_all(&half).unwrap();
    s.flush().unwrap();
    // Let the server start on the body before the signal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = srv.pid().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(&half).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 201"), "{reply}");
    let status = srv.terminate_wait();
    assert!(status.success(), "{status:?}");
    assert!(srv.log().contains("shutting down"));
}
