//! Integration tests: each starts the real `evi-server` binary on a free
//! loopback port with a temp data folder and talks to it over HTTP, on its
//! embedded SQLite; those of [`ON_POSTGRES`] run once more on Postgres and
//! a bucket ([`again_on_postgres`]).
//!
//! A new module: its `mod` line below, and its name in [`ON_POSTGRES`]
//! unless it looks into the SQLite file or the data folder.

mod accounts;
mod admin;
mod admin_settings;
mod admission;
mod backup;
mod blob_race;
mod blobs;
mod bodies;
mod bucket;
mod bucket_usage;
mod by_seq;
mod common;
mod crash;
mod crosssite;
mod data_folder;
mod device_ids;
mod device_pages;
mod empty_database;
mod forget_groups;
mod framed;
mod hardening;
mod help;
mod hygiene;
mod key_proof;
mod limiter;
mod meta;
#[path = "../../../tests/tests/e2e/on_postgres.rs"]
mod on_postgres;
mod openapi;
mod operator;
mod pairing;
#[path = "../../../tests/tests/e2e/pg_pool.rs"]
mod pg_pool;
mod quota;
mod read_ahead;
mod records;
mod replicas;
mod rotation;
mod s3;
mod secrets;
mod sqlite_only;
mod streams;
mod timeouts;
mod wait;
mod wire;

/// The modules whose tests run again on Postgres and a bucket. Not here:
/// those that open the SQLite file or check what lies in the data folder
/// (`backup`, `bucket`, `bucket_usage`, `data_folder`, `sqlite_only`), and `help`,
/// which starts no server.
const ON_POSTGRES: &[&str] = &[
    "accounts",
    "admin",
    "admission",
    "admin_settings",
    "blob_race",
    "blobs",
    "bodies",
    "by_seq",
    "crash",
    "crosssite",
    "device_ids",
    "device_pages",
    "empty_database",
    "forget_groups",
    "framed",
    "hardening",
    "hygiene",
    "key_proof",
    "limiter",
    "meta",
    "openapi",
    "operator",
    "pairing",
    "quota",
    "read_ahead",
    "records",
    "replicas",
    "rotation",
    "secrets",
    "streams",
    "timeouts",
    "wait",
];

/// Of [`ON_POSTGRES`], what only several servers on one Postgres database
/// have: `#[ignore]`d in the SQLite run, run on Postgres.
const ONLY_ON_POSTGRES: &[&str] = &["blob_race", "empty_database", "replicas"];

/// This process's backend: Postgres in the run `again_on_postgres` starts.
fn backend() -> common::Backend {
    common::Backend::of_this_run()
}

/// The tests of [`ON_POSTGRES`] on Postgres and a bucket, in a child
/// process running alongside the rest of this one. Without
/// `EVI_TEST_POSTGRES_URL` it says it skipped them, and fails under
/// `CI=true`. `EVI_TEST_BACKEND=postgres cargo test --release -p evi-server
/// --test api -- --include-ignored replicas::` runs some there alone.
#[test]
fn again_on_postgres() {
    if std::env::var("EVI_TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty()) {
        on_postgres::run(&on_postgres::Rerun {
            modules: ON_POSTGRES,
            only_there: ONLY_ON_POSTGRES,
            command: "cargo test --release -p evi-server --test api",
            // Mostly waiting on Postgres and the servers' fsyncs.
            threads: 4,
        });
        return;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "EVI_TEST_POSTGRES_URL is unset under CI=true: the tests on Postgres must run there"
    );
    // Straight to the descriptors: the harness captures println!.
    use std::io::Write as _;
    let msg = "SKIPPED: the API tests on Postgres need EVI_TEST_POSTGRES_URL \
               (e.g. postgres://postgres@127.0.0.1:5432/test); none of them ran";
    let _ = writeln!(std::io::stdout(), "{msg}");
    let _ = writeln!(std::io::stderr(), "{msg}");
}
