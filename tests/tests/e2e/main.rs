//! One end-to-end test binary (one link step, one compile), a module per
//! area. Every test drives the real `evi` binary against its own throwaway
//! eVi home. The servers are on SQLite; the modules in [`ON_POSTGRES`] run
//! once more with theirs on Postgres and a bucket ([`again_on_postgres`]).
//!
//! A new module: its `mod` line below, and its name in [`ON_POSTGRES`] if
//! its tests start a server.

mod agents;
mod agents_git;
mod agents_waiting;
mod checkpoint_forget;
mod common;
mod convergence;
mod deploy;
mod device_names;
mod docs;
mod drift;
mod fake_model;
mod first_hour_account;
mod first_hour_network;
mod first_hour_rows;
mod first_hour_sessions;
mod forget;
mod forget_agents;
mod forget_backup;
mod forget_race;
mod handoff;
mod handoff_git;
mod key_proof;
mod key_rotation;
mod link;
mod metadata_audit;
mod migrate;
mod on_postgres;
mod one_session;
mod pairing;
mod pg_db;
mod pg_pool;
mod real_claude_code;
mod real_clients;
mod real_codex;
mod real_gemini;
mod real_opencode;
mod redact;
mod replicas;
mod rewind;
mod rewind_sync;
mod s3;
mod schemathesis;
mod search;
mod server_backup;
mod server_data;
mod server_rollback;
mod sessions;
mod sessions_title;
mod sync;
mod sync_blobs;
mod sync_bucket;
mod sync_conditions;
mod sync_crash;
mod sync_disk_full;
mod sync_faults;
mod sync_interrupted;
mod sync_journal;
mod sync_kill;
mod sync_proxy;
mod sync_server_view;
mod sync_state;
mod sync_tamper;
mod sync_verify;
mod vectors;
mod watch;
mod watch_drift;
mod web;
mod web_browser;

/// The modules whose tests run again on Postgres and a bucket: those that
/// start a server. Not here: those that start none (`deploy`, `link`,
/// `rewind`, `sessions`, `vectors`, `web_browser`: the same on any backend,
/// as there is none), `real_claude_code` and `real_codex` (they judge what
/// lands in the agents' folders, which no backend changes, with the
/// agents' real clients), `migrate` (it moves a SQLite server to Postgres
/// and a bucket: both backends at once already), `sync_bucket` (SQLite with
/// a bucket, a mix only the SQLite run has), `replicas` (several servers
/// on one Postgres, whatever the run) and `server_backup` (`evi-server
/// backup` copies the embedded store only).
const ON_POSTGRES: &[&str] = &[
    "agents",
    "agents_git",
    "agents_waiting",
    "checkpoint_forget",
    "convergence",
    "device_names",
    "drift",
    "first_hour_account",
    "first_hour_network",
    "first_hour_rows",
    "first_hour_sessions",
    "forget",
    "forget_agents",
    "forget_backup",
    "forget_race",
    "key_proof",
    "handoff",
    "handoff_git",
    "key_rotation",
    "metadata_audit",
    "one_session",
    "pairing",
    "redact",
    "rewind_sync",
    "schemathesis",
    "search",
    "server_rollback",
    "sessions_title",
    "sync",
    "sync_blobs",
    "sync_conditions",
    "sync_crash",
    "sync_disk_full",
    "sync_faults",
    "sync_interrupted",
    "sync_journal",
    "sync_kill",
    "sync_server_view",
    "sync_state",
    "sync_tamper",
    "sync_verify",
    "watch",
    "watch_drift",
    "web",
];

/// Where this run's servers keep their metadata: the SQLite file in each
/// one's data folder, or a database of its own on Postgres in the run
/// below.
fn backend() -> pg_db::Backend {
    pg_db::Backend::of_this_run()
}

/// The tests of [`ON_POSTGRES`] on Postgres and a bucket, in a child
/// process running alongside the rest of this one (first by name, so that
/// the longer run starts first). `EVI_TEST_BACKEND=postgres cargo test
/// --release -p evi-tests --test e2e -- sync_kill::` runs some there alone.
#[test]
#[cfg_attr(
    evi_no_postgres,
    ignore = "needs EVI_TEST_POSTGRES_URL (a Postgres to create databases on, e.g. \
              postgres://postgres@127.0.0.1:5432/test)"
)]
fn again_on_postgres() {
    on_postgres::run(&on_postgres::Rerun {
        modules: ON_POSTGRES,
        only_there: &[],
        command: "cargo test --release -p evi-tests --test e2e",
        threads: 2,
    });
}
