//! Blobs: missing, upload, download, purge, limits, traversal, cut uploads.

use evi_server::store::BLOB_ROW_BYTES;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{TestServer, eventually, files_under, kid, raw_http};

#[tokio::test]
async fn upload_download_missing_purge() {
    let srv = TestServer::start(&[]);
    let a = srv.register("blobby").await;
    let (n1, n2) = (kid(4, 1), kid(4, 2));
    let (_, v) = a
        .post("/api/v1/blobs/missing", json!({"names": [n1, n2]}))
        .await;
    assert_eq!(v["missing"], json!([n1, n2]));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let (st, v) = a.put_blob(&n1, data.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v, json!({"name": n1, "size": 300_000, "created": true}));
    let (st, v) = a.put_blob(&n1, data.clone()).await;
    assert_eq!((st, v["created"].as_bool()), (StatusCode::OK, Some(false)));
    let (st, got) = a.get_blob(&n1).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(got, data);
    let (_, v) = a
        .post("/api/v1/blobs/missing", json!({"names": [n1, n2]}))
        .await;
    assert_eq!(v["missing"], json!([n2]));
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(
        (st["blobs"].as_u64(), st["bytes_used"].as_u64()),
        (Some(1), Some(300_000 + BLOB_ROW_BYTES))
    );

    let (_, v) = a
        .post("/api/v1/blobs/purge", json!({"names": [n1, n2]}))
        .await;
    assert_eq!(v["purged"], 1);
    assert_eq!(a.get_blob(&n1).await.0, StatusCode::NOT_FOUND);
    assert!(files_under(&srv.blobs_dir()).is_empty());
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(
        (st["blobs"].as_u64(), st["bytes_used"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn oversized_blob_is_413_with_or_without_length() {
    let srv = TestServer::start(&["--max-blob-bytes", "65536"]);
    let a = srv.register("bigblob").await;
    let name = kid(4, 9);
    let token = a.token.clone().unwrap();
    // A declared length past the limit is refused before any body is read
    // (a client sending the body anyway may see the connection close first:
    // clients check max_blob_bytes from capabilities before uploading).
    let head = format!(
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 65537\r\nConnection: close\r\n\r\n"
    );
    let reply = raw_http(&srv.addr, head.as_bytes(), true);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("payload_too_large"), "{reply}");
    assert_eq!(
        a.put_blob(&name, vec![0; 65_536]).await.0,
        StatusCode::CREATED
    );

    // Chunked, no Content-Length: stopped while streaming.
    let other = kid(4, 10);
    let mut req = format!(
        "PUT /api/v1/blobs/{other} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..10 {
        req.extend_from_slice(b"2000\r\n");
        req.extend_from_slice(&[1u8; 0x2000]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let reply = raw_http(&srv.addr, &req, true);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    let (_, v) = a
        .post("/api/v1/blobs/missing", json!({"names": [other]}))
        .await;
    assert_eq!(v["missing"], json!([other]));
    let files = files_under(&srv.blobs_dir());
    assert_eq!(files.len(), 1, "{files:?}");
}

#[tokio::test]
async fn traversal_and_malformed_names_are_400_and_create_nothing() {
    let srv = TestServer::start(&[]);
    let a = srv.register("walker").await;
    let token = a.token.clone().unwrap();
    let good = kid(4, 1);
    let bad_paths = [
        "..%2F..%2F..%2F..%2Fevil".to_owned(),
        "..%2f..%2fevil".to_owned(),
        "%2e%2e%2f%2e%2e%2fevil".to_owned(),
        "../../../../evil".to_owned(),
        "..".to_owned(),
        good.to_uppercase(),
        good[..63].to_owned(),
        format!("{good}00"),
        format!("{good}%00"),
    ];
    for p in &bad_paths {
        for method in ["PUT", "GET"] {
            let req = format!(
                "{method} /api/v1/blobs/{p} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
                 Content-Length: 4\r\nConnection: close\r\n\r\nevil"
            );
            let reply = raw_http(&srv.addr, req.as_bytes(), true);
            assert!(reply.starts_with("HTTP/1.1 400"), "{method} {p}: {reply}");
            assert!(reply.contains("invalid_id"), "{method} {p}: {reply}");
        }
    }
    for bad in ["../../evil", "UPPER", &good[..10]] {
        let (st, v) = a
            .post("/api/v1/blobs/missing", json!({"names": [good, bad]}))
            .await;
        assert_eq!(
            (st, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_id"))
        );
        let (st, _) = a.post("/api/v1/blobs/purge", json!({"names": [bad]})).await;
        assert_eq!(st, StatusCode::BAD_REQUEST);
    }
    // Nothing was written: the test root holds only the log and the data
    // folder, which holds only the database, the server's lock file and an
    // empty blobs folder.
    let mut top: Vec<_> = std::fs::read_dir(srv.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, ["data", "server.log"]);
    for f in files_under(&srv.data()) {
        let n = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            n.starts_with("evi-server.sqlite3") || n == "evi-server.lock",
            "unexpected file {f:?}"
        );
    }
    assert!(!srv.root.path().parent().unwrap().join("evil").exists());
}

#[tokio::test]
async fn a_cut_upload_leaves_no_blob() {
    let srv = TestServer::start(&[]);
    let a = srv.register("cutter").await;
    let token = a.token.clone().unwrap();
    let name = kid(4, 3);
    let mut req = format!(
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 1000000\r\n\r\n"
    )
    .into_bytes();
    req.extend_from_slice(&[9u8; 400_000]);
    // Send 40% of the body, then drop the connection.
    raw_http(&srv.addr, &req, false);
    let blobs = srv.blobs_dir();
    // The server notices the dropped connection and deletes its temp file.
    assert!(
        eventually(|| files_under(&blobs).is_empty()).await,
        "left behind: {:?}",
        files_under(&blobs)
    );
    let (_, v) = a
        .post("/api/v1/blobs/missing", json!({"names": [name]}))
        .await;
    assert_eq!(v["missing"], json!([name]));
    assert_eq!(a.get_blob(&name).await.0, StatusCode::NOT_FOUND);
    // A complete upload afterwards works.
    assert_eq!(
        a.put_blob(&name, vec![9; 1000]).await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn the_first_completed_upload_of_a_name_wins() {
    use std::io::{Read, Write};
    let srv = TestServer::start(&[]);
    let a = srv.register("racer").await;
    let name = kid(4, 77);
    let token = a.token.clone().unwrap();
    let blobs = srv.blobs_dir();
    // A slow upload of 9000 bytes: its head and half its body now.
    let mut slow = std::net::TcpStream::connect(&srv.addr).unwrap();
    write!(
        slow,
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 9000\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    slow.write_all(&[1u8; 4500]).unwrap();
    slow.flush().unwrap();
    if srv.s3.is_some() {
        // Not on a bucket: there "first wins" is a HEAD before an
        // unconditional PUT (s3s-fs has no conditional create), so a slower
        // upload of other bytes under one name may land last. A device's
        // names are keyed hashes of the bytes, so its uploads of one name
        // are the same bytes; see server/src/blobs/objects.rs.
        eprintln!("not checked on a bucket: first-wins of different bytes under one name");
        return;
    } else {
        let streaming = eventually(|| {
            files_under(&blobs)
                .iter()
                .any(|p| p.file_name().unwrap().to_string_lossy().starts_with(".tmp"))
        })
        .await;
        assert!(streaming, "the slow upload never reached the server");
    }

    // A one-byte upload of the same name completes first.
    let (st, v) = a.put_blob(&name, vec![2]).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["size"], 1);

    // Then the slow one: it is told the blob was there already.
    slow.write_all(&[1u8; 4500]).unwrap();
    let mut reply = String::new();
    slow.read_to_string(&mut reply).unwrap();
    let body: serde_json::Value =
        serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap_or_default();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert_eq!(
        (body["created"].as_bool(), body["size"].as_u64()),
        (Some(false), Some(1)),
        "{reply}"
    );

    // What is stored is the first completed upload, on disk and in the count.
    let (st, got) = a.get_blob(&name).await;
    assert_eq!((st, got), (StatusCode::OK, vec![2]));
    let files: Vec<_> = files_under(&blobs);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 1);
    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(st["bytes_used"], 1 + BLOB_ROW_BYTES);
}
