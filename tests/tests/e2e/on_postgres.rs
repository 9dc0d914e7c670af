//! The second backend without a second build. The tests of the modules a
//! test binary names (its `ON_POSTGRES`) run again in a child process of
//! the same executable with `EVI_TEST_BACKEND=postgres`, where every server
//! they start gets a database of its own on `EVI_TEST_POSTGRES_URL` (from
//! [`crate::pg_pool`]) and a bucket of its own on s3s-fs. The modules were
//! compiled a second time for that before, #[path]-included into a target
//! of their own; now they compile once, and the Postgres run overlaps the
//! SQLite one instead of following it.
//!
//! The child's tests are the parent's, by exact name: a test that fails
//! there fails `again_on_postgres`, whose output holds the child's whole
//! report, and the line to run it alone again. Tests only Postgres has are
//! `#[ignore]`d in the parent (saying so) and run in the child all the
//! same; other ignored tests stay ignored there.
//!
//! Shared by the e2e tests and the server's API tests (included there by
//! path).

use std::process::Command;

/// Names the backend of this process's servers ([`Backend::of_this_run`]).
pub const BACKEND_VAR: &str = "EVI_TEST_BACKEND";

/// Where the started servers keep their metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The SQLite file in the data folder (no `--database`).
    Sqlite,
    /// A database of its own per server on `EVI_TEST_POSTGRES_URL`'s
    /// server, and a bucket.
    Postgres,
}

impl Backend {
    /// This process's: Postgres in the run `again_on_postgres` starts
    /// (`EVI_TEST_BACKEND=postgres`, which also runs some tests there by
    /// hand), SQLite otherwise.
    pub fn of_this_run() -> Self {
        match std::env::var(BACKEND_VAR).as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("" | "sqlite") => Self::Sqlite,
            Ok("postgres") => Self::Postgres,
            other => panic!("{BACKEND_VAR}={other:?}: say `sqlite` (the default) or `postgres`"),
        }
    }
}

/// How a binary runs its tests again on Postgres.
pub struct Rerun<'a> {
    /// The modules whose tests run there, as in their `mod` lines.
    pub modules: &'a [&'a str],
    /// Of those, the modules only Postgres has: their tests are `#[ignore]`d
    /// here, saying so, and run in the child all the same.
    pub only_there: &'a [&'a str],
    /// The command that runs one of them alone, for the failure message
    /// (e.g. `cargo test --release -p evi-tests --test e2e`).
    pub command: &'a str,
    /// How many tests the child runs at once unless this run's
    /// `--test-threads` says: its tests mostly wait on servers and
    /// Postgres, so more than the cores' count.
    pub threads: usize,
}

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

/// Every test of this binary whose module is one of `modules` (with
/// `ignored`, only those the harness would skip), as the harness lists them.
fn tests_of(exe: &std::path::Path, modules: &[&str], ignored: bool) -> Vec<String> {
    let mut list = Command::new(exe);
    list.args(["--list", "--format", "terse"]);
    if ignored {
        list.arg("--ignored");
    }
    let out = list.output().expect("run this test binary with --list");
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
        ignored || empty.is_empty(),
        "ON_POSTGRES names modules without a test in this binary: {empty:?}; \
         a module is named there as in its `mod` line"
    );
    names
}

/// Runs the tests of `rerun.modules` on Postgres and a bucket, in a child
/// process; fails, saying which and how to rerun them, if any fails there.
pub fn run(rerun: &Rerun) {
    assert_eq!(
        Backend::of_this_run(),
        Backend::Sqlite,
        "{BACKEND_VAR}=postgres already makes this the run on Postgres, which \
         again_on_postgres starts by itself: name the tests to run there instead \
         (e.g. `-- sync_kill::`)"
    );
    let exe = std::env::current_exe().expect("the path of this test binary");
    // What is ignored here stays so there, unless only Postgres has it.
    let ignored = tests_of(&exe, rerun.modules, true);
    let names: Vec<String> = tests_of(&exe, rerun.modules, false)
        .into_iter()
        .filter(|name| {
            !ignored.contains(name)
                || rerun
                    .only_there
                    .iter()
                    .any(|m| name.starts_with(&format!("{m}::")))
        })
        .collect();
    let mut flags = forwarded_flags();
    if !flags.iter().any(|f| f.starts_with("--test-threads")) {
        flags.push(format!("--test-threads={}", rerun.threads));
    }
    if !rerun.only_there.is_empty() && !flags.iter().any(|f| f == "--include-ignored") {
        flags.push("--include-ignored".to_owned());
    }
    let out = Command::new(&exe)
        .env(BACKEND_VAR, "postgres")
        .args(flags)
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
         alone with `{BACKEND_VAR}=postgres {} -- --exact --include-ignored NAME`",
        out.status,
        rerun.command
    );
}
