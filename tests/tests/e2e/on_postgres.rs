//! The second backend without a second build. The tests of the modules
//! `crate::ON_POSTGRES` names run again in a child process of this same
//! executable with `EVI_TEST_BACKEND=postgres`, where every server they
//! start (`TestServer`) gets a database of its own on `EVI_TEST_POSTGRES_URL`
//! and a bucket of its own on s3s-fs. The modules were compiled a second
//! time for that before, #[path]-included into a target of their own; now
//! they compile once, and the Postgres run overlaps the SQLite one instead
//! of following it.
//!
//! The child's tests are the parent's, by exact name: a test that fails
//! there fails `again_on_postgres`, whose output holds the child's whole
//! report, and the line to run it alone again.

use std::process::Command;

use crate::pg_db::Backend;

/// Names the backend of this process's servers (`pg_db::Backend::of_this_run`).
pub const BACKEND_VAR: &str = "EVI_TEST_BACKEND";

/// The harness flags of this run that the child takes over: how many tests
/// run at once, whether output is shown, whether ignored ones run.
fn forwarded_flags() -> Vec<String> {
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--test-threads" => {
                out.push(a);
                out.extend(args.next());
            }
            "--nocapture" | "--no-capture" | "--include-ignored" => out.push(a),
            _ if a.starts_with("--test-threads=") => out.push(a),
            _ => {}
        }
    }
    out
}

/// Every test of this binary whose module is one of `modules`, as the
/// harness lists them.
fn tests_of(exe: &std::path::Path, modules: &[&str]) -> Vec<String> {
    let out = Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("run this test binary with --list");
    assert!(
        out.status.success(),
        "{} --list: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|name| {
            name.split_once("::")
                .is_some_and(|(module, _)| modules.contains(&module))
        })
        .map(str::to_owned)
        .collect();
    let empty: Vec<&&str> = modules
        .iter()
        .filter(|m| !names.iter().any(|n| n.starts_with(&format!("{m}::"))))
        .collect();
    assert!(
        empty.is_empty(),
        "ON_POSTGRES (main.rs) names modules without a test in this binary: {empty:?}; \
         a module is named there as in its `mod` line"
    );
    names
}

/// Runs the tests of `modules` on Postgres and a bucket, in a child
/// process; fails, saying which and how to rerun them, if any fails there.
pub fn run(modules: &[&str]) {
    assert_eq!(
        Backend::of_this_run(),
        Backend::Sqlite,
        "{BACKEND_VAR}=postgres already makes this the run on Postgres, which \
         again_on_postgres starts by itself: name the tests to run there instead \
         (e.g. `-- sync_kill::`)"
    );
    let exe = std::env::current_exe().expect("the path of this test binary");
    let names = tests_of(&exe, modules);
    let out = Command::new(&exe)
        .env(BACKEND_VAR, "postgres")
        .args(forwarded_flags())
        .arg("--exact")
        .args(&names)
        .output()
        .expect("run this test binary again on Postgres");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown under the harness's "---- again_on_postgres stdout ----" if
    // this fails, or with --nocapture.
    print!("{stdout}");
    eprint!("{stderr}");
    let failed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .collect();
    let summary = stdout
        .lines()
        .rfind(|l| l.starts_with("test result:"))
        .unwrap_or("no test result");
    assert!(
        out.status.success(),
        "on Postgres and a bucket ({summary}), these failed: {failed:?} ({}); run one \
         alone with `{BACKEND_VAR}=postgres cargo test --release -p evi-tests --test e2e \
         -- --exact NAME`",
        out.status
    );
}
