//! The server against its own OpenAPI document, by schemathesis: every
//! operation, well over a thousand generated requests (valid and invalid),
//! with every check schemathesis has that needs no second account or
//! stateful run: no 5xx, every status listed for its operation, every body
//! and header as the document says, every request the document calls valid
//! accepted and every one it calls invalid refused.
//!
//! The requests carry a real device token. Device revocation runs with the
//! token of another account, so nothing the run sends can revoke the device
//! whose token the rest of it uses (another account's devices are 404 to
//! it); the test checks that token still works at the end.
//!
//! schemathesis comes from PyPI, pinned with hashes in
//! `.ci/schemathesis-requirements.txt`; `.ci/run` installs it in a
//! virtualenv and names the executable in `EVI_SCHEMATHESIS`. Without it
//! the test is built ignored, with that reason (see `tests/build.rs`),
//! except under CI, where it runs and fails.

use serde_json::{Value, json};

use crate::common::{PASSWORD, TestServer};

/// Cases per operation and phase; 26 operations make about 2,300 cases.
const MAX_EXAMPLES: &str = "80";
const AT_LEAST_CASES: u64 = 1_000;

fn schemathesis() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("EVI_SCHEMATHESIS")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        let why = "schemathesis not found: EVI_SCHEMATHESIS must name its executable \
                   (.ci/run installs it from .ci/schemathesis-requirements.txt)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}

/// `POST /api/v1/{call}` for a user and device; the new device's token.
fn account(srv: &TestServer, call: &str, user: &str, device: &str) -> String {
    let resp = crate::common::http()
        .post(format!("{}/api/v1/{call}", srv.url))
        .json(&json!({"user": user, "password": PASSWORD, "device": device}))
        .send()
        .expect("request to the test server");
    assert!(resp.status().is_success(), "{call}: {}", resp.status());
    let v: Value = resp.json().unwrap();
    v["token"].as_str().unwrap().to_owned()
}

#[test]
#[cfg_attr(
    evi_no_schemathesis,
    ignore = "needs schemathesis: EVI_SCHEMATHESIS naming its executable (.ci/run installs it)"
)]
fn the_server_answers_as_its_openapi_document_says() {
    let Some(st) = schemathesis() else { return };
    // Long polls of GET /records/wait end after a second, not after the
    // default minute that schemathesis would give up on as a network error.
    let srv = TestServer::start_with(&["--max-wait-secs", "1"]);
    let token = account(&srv, "register", "fuzz", "fuzzing");
    let bystander = account(&srv, "register", "bystander", "one");
    account(&srv, "login", "bystander", "two");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            r#"headers = {{ Authorization = "Bearer {token}" }}
workers = 2
continue-on-failure = true

[[operations]]
include-name = "DELETE /api/v1/devices/{{id}}"
headers = {{ Authorization = "Bearer {bystander}" }}
"#
        ),
    )
    .unwrap();
    let report = dir.path().join("report.json");
    let out = std::process::Command::new(st)
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/api/v1/openapi.json", srv.url)])
        // The stateful phase is left out: it would chain a device id from
        // one answer into a revocation.
        .args(["--phases", "examples,coverage,fuzzing", "--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", "1"])
        .args(["--generation-database", "none", "--no-color"])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report)
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: Value = serde_json::from_slice(
        &std::fs::read(&report)
            .unwrap_or_else(|e| panic!("no report from schemathesis ({e}):\n{stdout}\n{stderr}")),
    )
    .unwrap();

    let cases = &r["test_cases"];
    eprintln!(
        "schemathesis: {} cases on {} operations, {} with failures, {} errored",
        cases["generated"], r["operations"]["total"], cases["with_failures"], cases["errored"]
    );
    assert_eq!(
        (&r["failures"], &r["errors"]),
        (&json!([]), &json!([])),
        "schemathesis found problems:\n{}\n{stdout}",
        failures_first(&stdout)
    );
    assert_eq!(r["exit_code"], 0, "{stdout}\n{stderr}");
    assert_eq!(r["operations"]["selected"], r["operations"]["total"]);
    assert!(
        cases["generated"].as_u64().unwrap() >= AT_LEAST_CASES,
        "only {} cases",
        cases["generated"]
    );
    // The token worked for every operation throughout, and still does.
    assert_eq!(r["warnings"]["missing_auth"], json!([]), "{stdout}");
    let devices = srv.get_json(&token, "devices");
    assert_eq!(devices["devices"][0]["name"], "fuzzing", "{devices}");
}

/// The section of schemathesis' output that names each failure (the
/// operation, the status or body it got, the curl command that reproduces
/// it), at most 8 KB of it: CI keeps only so much of a failed test's
/// message, and the whole output of a run is mostly the per-phase tallies.
fn failures_first(stdout: &str) -> &str {
    let start = stdout
        .find(" FAILURES ")
        .or_else(|| stdout.find(" ERRORS "));
    let Some(start) = start else { return "" };
    let section = &stdout[start..];
    let end = section.find(" SUMMARY ").unwrap_or(section.len());
    let mut end = end.min(8 << 10);
    while !section.is_char_boundary(end) {
        end -= 1;
    }
    &section[..end]
}
