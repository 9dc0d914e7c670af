//! Which optional tools the end-to-end tests find on this machine, as cfgs:
//! a test whose tool is missing is then marked ignored with the reason, so
//! `cargo test` reports it as `ignored, needs …` instead of a pass that
//! tested nothing. Under CI (`CI` set; `.ci/run` installs every tool) no
//! test is ignored: a missing tool fails its test there.
//!
//! - `evi_no_browser`: no `/usr/bin/chromium` or `/usr/bin/chromedriver`
//!   (`tests/e2e/web_browser.rs`);
//! - `evi_no_schemathesis`: `EVI_SCHEMATHESIS` does not name a file
//!   (`tests/e2e/schemathesis.rs`);
//! - `evi_no_git`: `git --version` does not run (`tests/e2e/handoff_git.rs`);
//! - `evi_no_s3`: `EVI_TEST_S3_SERVER` does not name a file (the s3s-fs
//!   binary of `tests/e2e/s3.rs`);
//! - `evi_no_postgres`: `EVI_TEST_POSTGRES_URL` is unset or empty (the run
//!   on Postgres, `tests/e2e/on_postgres.rs`, and `tests/e2e/replicas.rs`).
//! - `evi_no_agent_clients`: the agents' real clients, `claude`, `codex`,
//!   `gemini` and `opencode`,
//!   are not in `EVI_AGENT_CLIENTS` (else `.ci/agents/node_modules/.bin`,
//!   where `.ci/run` installs them; `tests/e2e/real_clients.rs`). The folder
//!   found is passed to the tests as `EVI_AGENT_CLIENTS_DIR`.
//!
//! Installing a tool changes `/usr/bin` (or the variable), which reruns
//! this script and rebuilds the tests with the test enabled.

use std::path::{Path, PathBuf};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(evi_no_browser)");
    println!("cargo::rustc-check-cfg=cfg(evi_no_schemathesis)");
    println!("cargo::rustc-check-cfg=cfg(evi_no_git)");
    println!("cargo::rustc-check-cfg=cfg(evi_no_s3)");
    println!("cargo::rustc-check-cfg=cfg(evi_no_postgres)");
    println!("cargo::rustc-check-cfg=cfg(evi_no_agent_clients)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=EVI_SCHEMATHESIS");
    println!("cargo::rerun-if-env-changed=EVI_TEST_S3_SERVER");
    println!("cargo::rerun-if-env-changed=EVI_TEST_POSTGRES_URL");
    println!("cargo::rerun-if-env-changed=EVI_AGENT_CLIENTS");
    // Watched as folders that exist: a path that does not exist would make
    // cargo run this script, and rebuild the tests, on every build.
    if Path::new("/usr/bin").is_dir() {
        println!("cargo::rerun-if-changed=/usr/bin");
    }
    let schemathesis = std::env::var_os("EVI_SCHEMATHESIS").map(std::path::PathBuf::from);
    if let Some(dir) = schemathesis.as_deref().and_then(Path::parent)
        && dir.is_dir()
    {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
    let s3 = std::env::var_os("EVI_TEST_S3_SERVER").map(std::path::PathBuf::from);
    if let Some(dir) = s3.as_deref().and_then(Path::parent)
        && dir.is_dir()
    {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
    let clients = agent_clients();
    println!(
        "cargo::rustc-env=EVI_AGENT_CLIENTS_DIR={}",
        clients.display()
    );
    if std::env::var_os("CI").is_some() {
        return;
    }
    if !(Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()) {
        println!("cargo::rustc-cfg=evi_no_browser");
    }
    if !schemathesis.is_some_and(|p| p.is_file()) {
        println!("cargo::rustc-cfg=evi_no_schemathesis");
    }
    let git = std::process::Command::new("git").arg("--version").output();
    if !git.is_ok_and(|o| o.status.success()) {
        println!("cargo::rustc-cfg=evi_no_git");
    }
    if !s3.is_some_and(|p| p.is_file()) {
        println!("cargo::rustc-cfg=evi_no_s3");
    }
    if std::env::var_os("EVI_TEST_POSTGRES_URL").is_none_or(|u| u.is_empty()) {
        println!("cargo::rustc-cfg=evi_no_postgres");
    }
    if !["claude", "codex", "gemini", "opencode"]
        .iter()
        .all(|c| clients.join(c).is_file())
    {
        println!("cargo::rustc-cfg=evi_no_agent_clients");
    }
}

/// The folder holding the agents' clients: `EVI_AGENT_CLIENTS`, else where
/// `.ci/run` installs them. Its folder is watched (`.ci/agents` for the
/// default: it is committed, so it exists), so installing reruns this.
fn agent_clients() -> PathBuf {
    let ci_agents = Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../.ci/agents");
    let dir = std::env::var_os("EVI_AGENT_CLIENTS")
        .filter(|v| !v.is_empty())
        .map_or_else(|| ci_agents.join("node_modules/.bin"), PathBuf::from);
    let watched = if dir.is_dir() { &dir } else { &ci_agents };
    if watched.is_dir() {
        println!("cargo::rerun-if-changed={}", watched.display());
    }
    dir
}
