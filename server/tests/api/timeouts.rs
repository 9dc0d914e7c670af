//! Clients that stop halfway: half a header, a body that stops, an answer
//! nobody reads. Each connection is closed after the configured time (set
//! to one second here); what the tests assert is that it gets closed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::{TestServer, eventually, kid};

/// Everything the server sends until it closes the connection; panics if
/// it is still open after a minute.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the connection stayed open ({e}) after {} bytes", got.len()),
        }
    }
}

#[tokio::test]
async fn half_a_header_or_nothing_at_all_is_closed() {
    let srv = TestServer::start(&["--header-timeout", "1"]);
    let mut half = TcpStream::connect(&srv.addr).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut silent = TcpStream::connect(&srv.addr).unwrap();
    let mut kept = TcpStream::connect(&srv.addr).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (h, s) =
        tokio::task::spawn_blocking(move || (until_closed(&mut half), until_closed(&mut silent)))
            .await
            .unwrap();
    // Whatever hyper says on the way out, no request was served.
    assert!(!String::from_utf8_lossy(&h).contains("ok"), "{h:?}");
    assert!(s.is_empty() || !String::from_utf8_lossy(&s).contains("200"));
    // A kept-alive connection gets its answer, then is closed when no next
    // request comes.
    let k = tokio::task::spawn_blocking(move || until_closed(&mut kept))
        .await
        .unwrap();
    let k = String::from_utf8_lossy(&k);
    assert!(k.starts_with("HTTP/1.1 200") && k.ends_with("ok"), "{k}");
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_cut_with_408() {
    let srv = TestServer::start(&["--body-timeout", "1"]);
    let api = srv.register("stall").await;
    let token = api.token.clone().unwrap();
    let name = kid(4, 1);
    let requests = [
        "POST /api/v1/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{\"user\":"
            .to_owned(),
        format!(
            "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n0123456789"
        ),
    ];
    for req in requests {
        let mut s = TcpStream::connect(&srv.addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let got = tokio::task::spawn_blocking(move || until_closed(&mut s))
            .await
            .unwrap();
        let got = String::from_utf8_lossy(&got).into_owned();
        assert!(got.starts_with("HTTP/1.1 408"), "{got}");
        let body: serde_json::Value =
            serde_json::from_str(got.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
        assert_eq!(body["code"], "request_timeout", "{got}");
    }
    // The cut upload stored nothing.
    let (_, v) = api
        .post(
            "/api/v1/blobs/missing",
            serde_json::json!({"names": [name]}),
        )
        .await;
    assert_eq!(v["missing"], serde_json::json!([name]));
}

#[tokio::test]
async fn a_client_that_stops_reading_its_answer_is_disconnected() {
    // The close is logged at DEBUG (a flood of them is summed at WARN).
    let srv = TestServer::start_env(
        &["--idle-timeout", "1"],
        &[("EVI_SERVER_LOG", "evi_server=debug")],
    );
    let api = srv.register("reader").await;
    let token = api.token.clone().unwrap();
    let name = kid(4, 2);
    // Larger than what the socket buffers of both ends hold.
    let size = 32 << 20;
    let (st, v) = api.put_blob(&name, vec![7u8; size]).await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    write!(
        s,
        "GET /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    // Read nothing until the server says it gave up on this connection
    // (others, such as the client's idle pooled one, close the same way).
    let peer = format!("peer={}", s.local_addr().unwrap());
    let closed = eventually(|| {
        srv.log()
            .lines()
            .any(|l| l.contains("closed a connection on which nothing moved") && l.contains(&peer))
    })
    .await;
    assert!(closed, "the server never closed the stalled download");
    let got = tokio::task::spawn_blocking(move || until_closed(&mut s))
        .await
        .unwrap();
    assert!(
        got.len() < size,
        "the whole blob came ({} bytes) though the connection was closed",
        got.len()
    );
}
