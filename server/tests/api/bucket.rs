//! `--store`: bodies and blobs in an S3-compatible bucket (a real s3s-fs
//! server, see [`crate::s3`]) or in a folder of their own, as an operator
//! would check them: what a device pushed and uploaded comes back byte for
//! byte, the bucket holds it where the docs say, the data folder holds
//! none of it, a store that goes away costs 503s and nothing else, and a
//! store that cannot work stops the start with what to fix.

use std::path::Path;
use std::process::Command;

use object_store::ObjectStoreExt as _;
use object_store::path::Path as ObjPath;
use reqwest::StatusCode;

use crate::common::{TestServer, files_under, kid};
use crate::s3::{BUCKET, S3Server, SECRET_KEY};
use crate::wire::{Seg, seg};

/// A server on `s3` under prefix `evi`, with `args`.
fn server_on(s3: &S3Server, args: &[&str]) -> TestServer {
    let url = format!("s3://{BUCKET}/evi");
    let mut all = vec!["--store", url.as_str()];
    all.extend_from_slice(args);
    let envs = s3.envs();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestServer::start_env(&all, &envs)
}

/// The files in a data folder other than the database and its lock: with
/// a store elsewhere, there must be none (no pack, no blob, no temp file).
fn stray_files(data: &Path) -> Vec<String> {
    files_under(data)
        .into_iter()
        .map(|p| p.strip_prefix(data).unwrap().display().to_string())
        .filter(|p| !p.starts_with("evi-server.sqlite3") && p != "evi-server.lock")
        .collect()
}

fn blob(n: usize, tag: u8) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + tag as usize) as u8).collect()
}

#[tokio::test]
async fn bodies_and_blobs_live_in_the_bucket_and_come_back_byte_for_byte() {
    let Some(s3) = S3Server::start() else { return };
    // Batches up to 24 MB, so one pack passes the multipart threshold.
    let srv = server_on(&s3, &["--max-batch-bytes", "24000000"]);
    let a = srv.register("bucket").await;
    let small: Vec<Seg> = (0..50).map(|i| seg(1, i, 1_000 + i as usize)).collect();
    let v = a.push_frames(&small).await;
    assert_eq!(v["stored"], 50, "{v}");
    // One 12 MB body: its pack goes up in parts.
    let big = vec![seg(2, 1000, 12 * 1024 * 1024)];
    let v = a.push_frames(&big).await;
    assert_eq!(v["stored"], 1, "{v}");

    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 51);
    for ((head, body), sent) in all.iter().zip(small.iter().chain(&big)) {
        assert_eq!(head.entry_ids, sent.head.entry_ids);
        assert!(body == &sent.body, "body of {:?} differs", head.entry_ids);
    }
    // The JSON pull reads the same bodies (small runs by ranges).
    let (json, _) = a.pull_all(Some(7)).await;
    assert_eq!(json.len(), 51);

    // Blobs: a small one, and one of 20 MB that goes up in parts.
    let (small_name, large_name) = (kid(9, 1), kid(9, 2));
    let (small_blob, large_blob) = (blob(3_000, 1), blob(20 * 1024 * 1024, 2));
    let (st, v) = a.put_blob(&small_name, small_blob.clone()).await;
    assert_eq!(
        (st, v["created"].as_bool()),
        (StatusCode::CREATED, Some(true)),
        "{v}"
    );
    let (st, v) = a.put_blob(&large_name, large_blob.clone()).await;
    assert_eq!(
        (st, v["size"].as_u64()),
        (StatusCode::CREATED, Some(20 * 1024 * 1024)),
        "{v}"
    );
    let (st, got) = a.get_blob(&large_name).await;
    assert_eq!(st, StatusCode::OK);
    assert!(got == large_blob, "large blob differs");
    assert_eq!(a.get_blob(&small_name).await.1, small_blob);
    // First upload wins: the second one of a name keeps the first's bytes.
    let (st, v) = a.put_blob(&small_name, blob(3_000, 7)).await;
    assert_eq!(
        (st, v["created"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    assert_eq!(a.get_blob(&small_name).await.1, small_blob);

    // Where the docs say: PREFIX/bodies/<user>/<pack>, PREFIX/blobs/<user>/<name>.
    let objects = s3.objects().await;
    let packs: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.starts_with("evi/bodies/"))
        .collect();
    assert_eq!(packs.len(), 2, "{objects:?}");
    assert!(
        packs.iter().any(|(_, size)| *size == 12 * 1024 * 1024),
        "{objects:?}"
    );
    let blobs: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.starts_with("evi/blobs/"))
        .collect();
    assert_eq!(blobs.len(), 2, "{objects:?}");
    assert!(
        blobs
            .iter()
            .any(|(k, s)| k.ends_with(&large_name) && *s == 20 * 1024 * 1024),
        "{objects:?}"
    );
    assert_eq!(objects.len(), 4, "nothing else in the bucket: {objects:?}");
    assert_eq!(stray_files(&srv.data()), Vec::<String>::new());

    // Purge deletes the object too.
    let (st, v) = a
        .post(
            "/api/v1/blobs/purge",
            serde_json::json!({"names": [large_name]}),
        )
        .await;
    assert_eq!((st, v["purged"].as_u64()), (StatusCode::OK, Some(1)), "{v}");
    assert_eq!(s3.objects().await.len(), 3);
    assert!(
        !srv.log().contains(SECRET_KEY),
        "the secret key reached the log"
    );
}

#[tokio::test]
async fn an_old_unreferenced_pack_in_the_bucket_is_swept_at_start() {
    let Some(s3) = S3Server::start() else { return };
    let mut srv = server_on(&s3, &[]);
    let a = srv.register("sweep").await;
    a.push_frames(&[seg(1, 1, 100), seg(1, 2, 100)]).await;
    let used = s3.objects().await;
    assert_eq!(used.len(), 1);
    let user_dir = used[0].0.rsplit_once('/').unwrap().0.to_owned();
    // What a push that crashed before its commit leaves, an hour and more
    // ago, and what a push on another replica holds right now.
    let client = s3.client();
    let hour_and_a_bit = evi_server::bodies::ORPHAN_MIN_AGE + std::time::Duration::from_secs(60);
    let old = ulid::Ulid::from_datetime(std::time::SystemTime::now() - hour_and_a_bit);
    let young = ulid::Ulid::new();
    for name in [old, young] {
        let path = ObjPath::parse(format!("{user_dir}/{name}")).unwrap();
        client.put(&path, vec![7u8; 4096].into()).await.unwrap();
    }
    assert_eq!(s3.objects().await.len(), 3);

    srv.stop();
    srv.start_again();
    let keys: Vec<String> = s3.objects().await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.contains(&used[0].0),
        "the used pack was swept: {keys:?}"
    );
    assert!(
        keys.contains(&format!("{user_dir}/{young}")),
        "the young pack was swept: {keys:?}"
    );
    assert!(srv.log().contains("orphan body packs"), "{}", srv.log());
    let a = srv.rebase(&a);
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 2);
}

#[tokio::test]
async fn with_the_bucket_down_pushes_and_uploads_get_503_and_succeed_once_it_is_back() {
    let Some(mut s3) = S3Server::start() else {
        return;
    };
    let srv = server_on(&s3, &[]);
    let a = srv.register("outage").await;
    a.push_frames(&[seg(1, 1, 500)]).await;
    let stored = kid(9, 7);
    a.put_blob(&stored, blob(2_000, 7)).await;
    s3.stop();

    let later = [seg(1, 2, 500), seg(1, 3, 500)];
    let resp = a
        .http
        .post(format!("{}/api/v1/records", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .header("content-type", evi_shared::frames::CONTENT_TYPE)
        .body(crate::wire::push_body(&later))
        .send()
        .await
        .unwrap();
    let (st, retry_after) = (resp.status(), resp.headers().get("retry-after").cloned());
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "unavailable", "{body}");
    assert!(retry_after.is_some(), "no Retry-After");
    let name = kid(9, 3);
    let (st, v) = a.put_blob(&name, blob(10_000, 3)).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let (st, _) = a.get_blob(&kid(9, 4)).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "unknown blobs are still unknown");
    // Reads wait too: a stored blob, and a JSON pull page, are 503.
    let (st, _) = a.get_blob(&stored).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    let (st, v) = a.get("/api/v1/records?after=0").await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        srv.log().contains("the object store did not answer"),
        "{}",
        srv.log()
    );
    // Nothing half-stored: the status counts only the first record.
    let (_, status) = a.get("/api/v1/status").await;
    assert_eq!(status["records"], 1, "{status}");

    s3.start_again();
    let v = a.push_frames(&later).await;
    assert_eq!(v["stored"], 2, "{v}");
    let (st, v) = a.put_blob(&name, blob(10_000, 3)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 3);
    assert!(all[2].1 == later[1].body);
    assert_eq!(a.get_blob(&name).await.1, blob(10_000, 3));
    assert_eq!(a.get_blob(&stored).await.1, blob(2_000, 7));
    assert_eq!(stray_files(&srv.data()), Vec::<String>::new());
    assert!(
        !srv.log().contains(SECRET_KEY),
        "the secret key reached the log"
    );
}

/// Runs `evi-server` with `args` and `envs` on a fresh data folder, expects
/// it to refuse to start; returns its exit code and stderr.
fn refused(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(root.path().join("data"))
        .args(args)
        .env_remove("EVI_SERVER_STORE")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ALLOW_HTTP")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.is_empty(), "it started: {stdout}");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_store_url_that_cannot_work_is_refused_with_what_to_write() {
    let (code, err) = refused(&["--store", "ftp://host/x"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("use s3://BUCKET/PREFIX or file:///PATH"),
        "{err}"
    );
    let (code, err) = refused(&["--store", "file://relative/dir"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs an absolute path"), "{err}");
    let (code, err) = refused(&["--store", "s3://key:secret@bucket/x"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("never in the URL"), "{err}");
    // Without keys it says which variable is missing (and never goes
    // looking for instance credentials).
    let (code, err) = refused(&["--store", "s3://some-bucket/p"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("AWS_ACCESS_KEY_ID is not set"), "{err}");
    assert!(err.contains("hint: set AWS_ACCESS_KEY_ID"), "{err}");
    // A plain-http endpoint needs saying so.
    let keys = [
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ];
    let (code, err) = refused(&["--store", "s3://some-bucket/p"], &keys);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("AWS_ALLOW_HTTP=true"), "{err}");
    // An endpoint where nothing listens: the bucket does not answer.
    let mut keys = keys.to_vec();
    keys.push(("AWS_ALLOW_HTTP", "true"));
    let (code, err) = refused(&["--store", "s3://some-bucket/p"], &keys);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot list the bucket"), "{err}");
    assert!(err.contains("hint: check that the bucket exists"), "{err}");
    assert!(
        !err.contains(SECRET_KEY),
        "the secret key was printed: {err}"
    );
}

#[test]
fn a_missing_bucket_or_wrong_keys_stop_the_start() {
    let Some(s3) = S3Server::start() else { return };
    let envs = s3.envs();
    let mut envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, err) = refused(&["--store", "s3://no-such-bucket/p"], &envs);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("s3://no-such-bucket/p: cannot list the bucket"),
        "{err}"
    );
    envs.retain(|(k, _)| *k != "AWS_SECRET_ACCESS_KEY");
    envs.push(("AWS_SECRET_ACCESS_KEY", "wrong-secret-Qm4rT8"));
    let (code, err) = refused(&["--store", &format!("s3://{BUCKET}/p")], &envs);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot list the bucket"), "{err}");
    assert!(
        !err.contains("wrong-secret-Qm4rT8"),
        "the secret key was printed: {err}"
    );
}

#[tokio::test]
async fn a_file_store_keeps_bodies_and_blobs_in_its_own_folder() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().join("objects").display());
    let srv = TestServer::start(&["--store", &url]);
    let a = srv.register("folder").await;
    let segs: Vec<Seg> = (0..10).map(|i| seg(1, i, 2_000)).collect();
    a.push_frames(&segs).await;
    let name = kid(9, 5);
    let (st, _) = a.put_blob(&name, blob(5_000, 5)).await;
    assert_eq!(st, StatusCode::CREATED);
    let (all, _) = a.pull_all_frames().await;
    assert_eq!(all.len(), 10);
    assert!(all.iter().zip(&segs).all(|((_, b), s)| b == &s.body));
    assert_eq!(a.get_blob(&name).await.1, blob(5_000, 5));

    let root = store.path().join("objects");
    let packs = files_under(&root.join("bodies"));
    assert_eq!(packs.len(), 1, "{packs:?}");
    assert_eq!(std::fs::metadata(&packs[0]).unwrap().len(), 10 * 2_000);
    let blobs = files_under(&root.join("blobs"));
    assert_eq!(blobs.len(), 1, "{blobs:?}");
    assert!(blobs[0].ends_with(&name));
    use std::os::unix::fs::PermissionsExt as _;
    for f in packs.iter().chain(&blobs) {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", f.display());
    }
    assert_eq!(stray_files(&srv.data()), Vec::<String>::new());
}

/// PUTs `len` bytes to a blob with chunked transfer encoding (no declared
/// length, so the limit can only be found while the bytes stream), and
/// returns the status line of the answer.
fn put_chunked(addr: &str, token: &str, name: &str, len: usize) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "PUT /api/v1/blobs/{name} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let chunk = vec![5u8; 1 << 20];
    let mut sent = 0;
    // The server may answer and close before the end: later writes fail.
    while sent < len {
        let n = chunk.len().min(len - sent);
        let mut frame = format!("{n:x}\r\n").into_bytes();
        frame.extend_from_slice(&chunk[..n]);
        frame.extend_from_slice(b"\r\n");
        if s.write_all(&frame).is_err() {
            break;
        }
        sent += n;
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_blob_upload_cut_at_its_limit_leaves_no_object_and_no_parts() {
    let Some(s3) = S3Server::start() else { return };
    let srv = server_on(&s3, &["--max-blob-bytes", "20000000"]);
    let a = srv.register("limit").await;
    let (addr, token, name) = (srv.addr.clone(), a.token.clone().unwrap(), kid(9, 6));
    // 24 MiB: two parts leave before the limit is passed.
    let status = tokio::task::spawn_blocking(move || put_chunked(&addr, &token, &name, 24 << 20))
        .await
        .unwrap();
    assert!(status.contains(" 413 "), "{status}");
    assert!(
        !s3.objects()
            .await
            .iter()
            .any(|(k, _)| k.starts_with("evi/blobs/")),
        "an object appeared"
    );
    // s3s-fs keeps the parts of an unfinished upload as `.upload_id-*`
    // files in its root: the upload was aborted, so there are none.
    let parts: Vec<_> = std::fs::read_dir(s3.root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".upload_id-"))
        .collect();
    assert_eq!(parts, Vec::<String>::new(), "parts left behind");
    // The same name uploads fine within the limit afterwards.
    let (st, v) = a.put_blob(&kid(9, 6), blob(10 << 20, 6)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(a.get_blob(&kid(9, 6)).await.1, blob(10 << 20, 6));
    assert_eq!(stray_files(&srv.data()), Vec::<String>::new());
}

/// The part files s3s-fs keeps in its root for unfinished multipart uploads.
fn upload_parts(s3: &S3Server) -> Vec<String> {
    std::fs::read_dir(s3.root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".upload_id-"))
        .collect()
}

#[tokio::test]
async fn a_multipart_upload_a_killed_server_left_is_aborted_by_a_later_start() {
    use std::io::Write as _;
    let Some(s3) = S3Server::start() else { return };
    let mut srv = server_on(&s3, &[]);
    let a = srv.register("killed").await;
    // 20 MiB of a blob that never ends: two 8 MiB parts leave for the
    // bucket, then the server is killed under the upload.
    let mut conn = std::net::TcpStream::connect(&srv.addr).unwrap();
    let head = format!(
        "PUT /api/v1/blobs/{} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        kid(9, 8),
        srv.addr,
        a.token.clone().unwrap()
    );
    conn.write_all(head.as_bytes()).unwrap();
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..20 {
        conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .unwrap();
        conn.write_all(&chunk).unwrap();
        conn.write_all(b"\r\n").unwrap();
    }
    assert!(
        crate::common::eventually(|| upload_parts(&s3).len() >= 2).await,
        "the upload's parts never reached the bucket: {:?}",
        upload_parts(&s3)
    );
    srv.stop();
    drop(conn);
    let parts = upload_parts(&s3);
    let markers = |objects: &[(String, u64)]| {
        objects
            .iter()
            .filter(|(k, _)| k.starts_with("evi/uploads/"))
            .count()
    };
    assert_eq!(markers(&s3.objects().await), 1, "{:?}", s3.objects().await);

    // A start within the ttl keeps it: it may be another replica's upload
    // under way.
    srv.set_flag("--upload-ttl-secs", Some("3600"));
    srv.start_again();
    assert_eq!(upload_parts(&s3), parts, "a young upload was touched");
    srv.stop();

    // Past it, the next start aborts it: no part stays billed, no marker
    // stays, and no object appeared.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    srv.set_flag("--upload-ttl-secs", Some("1"));
    srv.start_again();
    assert_eq!(upload_parts(&s3), Vec::<String>::new(), "parts left behind");
    let objects = s3.objects().await;
    assert_eq!(markers(&objects), 0, "{objects:?}");
    assert!(
        !objects.iter().any(|(k, _)| k.starts_with("evi/blobs/")),
        "{objects:?}"
    );
    assert!(
        srv.log().contains("aborted multipart uploads"),
        "{}",
        srv.log()
    );
    // The name uploads whole afterwards.
    let a = srv.rebase(&a);
    let (st, v) = a.put_blob(&kid(9, 8), blob(10 << 20, 8)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(a.get_blob(&kid(9, 8)).await.1, blob(10 << 20, 8));
}
