//! A real S3-compatible server for the tests: `s3s-fs` (the binary
//! `EVI_TEST_S3_SERVER` names; `.ci/run` installs it) on a free loopback
//! port, keeping its objects in a temp folder, with one bucket of its own
//! per test. Outside CI a missing server skips the test with a line saying
//! so; under CI it fails it.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt as _;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

pub const ACCESS_KEY: &str = "evi-test-access-key";
/// Long and distinctive, so a test can tell it never reached a log.
pub const SECRET_KEY: &str = "evi-test-secret-Zq7pW3nL9xK2vB5m";
pub const BUCKET: &str = "evi-test";

pub struct S3Server {
    child: Option<Child>,
    bin: PathBuf,
    pub port: u16,
    /// s3s-fs's root: one folder per bucket.
    pub root: tempfile::TempDir,
}

/// The S3 test server's binary, or `None` (outside CI only) when it is
/// not installed.
fn server_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("EVI_TEST_S3_SERVER")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if bin.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "EVI_TEST_S3_SERVER must name the s3s-fs binary in CI (.ci/run installs it)"
        );
        eprintln!(
            "skipped: no S3 test server (set EVI_TEST_S3_SERVER to an s3s-fs binary: \
             cargo install s3s-fs --features binary)"
        );
    }
    bin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl S3Server {
    /// Starts a server with an empty bucket [`BUCKET`]; `None` when there is
    /// no server to start (see the module doc).
    pub fn start() -> Option<Self> {
        let bin = server_bin()?;
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let mut s = Self {
            child: None,
            bin,
            port: free_port(),
            root,
        };
        s.start_again();
        Some(s)
    }

    /// The endpoint URL (plain http on loopback).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The variables an `evi-server` needs to reach the bucket.
    pub fn envs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// SIGKILL: the store is gone, its objects stay in its folder.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts (again) on the same port and folder; returns once it accepts
    /// connections.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join("s3.log"))
            .unwrap();
        let child = Command::new(&self.bin)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.root.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the S3 test server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client of the bucket, to look at and plant objects as an
    /// operator's tool would.
    pub fn client(&self) -> Arc<dyn ObjectStore> {
        evi_server::storage::install_tls_provider();
        let s3 = AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_region("us-east-1")
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .build()
            .unwrap();
        Arc::new(s3)
    }

    /// Every object key in the bucket, sorted, with its size.
    pub async fn objects(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .client()
            .list(None)
            .map_ok(|m| (m.location.to_string(), m.size))
            .try_collect()
            .await
            .unwrap();
        out.sort();
        out
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
