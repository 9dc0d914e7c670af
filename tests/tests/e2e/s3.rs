//! A real S3-compatible server for the end-to-end tests: `s3s-fs` (the
//! binary `EVI_TEST_S3_SERVER` names; `.ci/run` installs it) on a free
//! loopback port, its objects in a temp folder (`<root>/<bucket>/<key>`),
//! one bucket per test. Outside CI a missing server skips the test with a
//! line saying so; under CI it fails it.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "evi-e2e-access-key";
/// Long and distinctive, so a test can tell it never reached a log.
pub const SECRET_KEY: &str = "evi-e2e-secret-Hk3sR8vT1wQ6";
pub const BUCKET: &str = "evi-e2e";

pub struct S3Server {
    child: Option<Child>,
    bin: PathBuf,
    pub port: u16,
    pub root: tempfile::TempDir,
}

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

impl S3Server {
    /// Starts a server with an empty bucket [`BUCKET`]; `None` when there is
    /// no server to start (see the module doc).
    pub fn start() -> Option<Self> {
        let bin = server_bin()?;
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = Self {
            child: None,
            bin,
            port,
            root,
        };
        s.start_again();
        Some(s)
    }

    /// `--store` and the environment for an `evi-server` on this bucket.
    pub fn server_args(&self, prefix: &str) -> (String, Vec<(&'static str, String)>) {
        (
            format!("s3://{BUCKET}/{prefix}"),
            vec![
                ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
                ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
                ("AWS_REGION", "us-east-1".to_owned()),
                (
                    "AWS_ENDPOINT_URL",
                    format!("http://127.0.0.1:{}", self.port),
                ),
                ("AWS_ALLOW_HTTP", "true".to_owned()),
            ],
        )
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
        let child = Command::new(&self.bin)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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

    /// The keys of the objects in the bucket, sorted.
    pub fn keys(&self) -> Vec<String> {
        let bucket = self.root.path().join(BUCKET);
        let mut out: Vec<String> = files_under(&bucket)
            .into_iter()
            .map(|p| p.strip_prefix(&bucket).unwrap().display().to_string())
            .collect();
        out.sort();
        out
    }
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
