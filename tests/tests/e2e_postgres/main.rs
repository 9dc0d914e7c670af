//! The sync suites against Postgres: every started server gets a database
//! of its own on the server `EVI_TEST_POSTGRES_URL` names, and a bucket of
//! its own on an S3 test server (skipped, saying so, when it is unset; a
//! failure under `CI=true`). The modules are the SQLite target's that start
//! a server; those that look at what it stores do so through the helpers
//! that read the Postgres rows and the bucket here (`TestServer::stores`,
//! `stored`, `back_up`, `restore`). Not doubled here: those that start no
//! server (`deploy`, `link`, `rewind`, `sessions`, `vectors`,
//! `web_browser`: the same on any backend, as there is none), `migrate`
//! (it moves a SQLite server to Postgres and a bucket: both backends at
//! once already), and `sync_bucket` (SQLite with a bucket, the mix only
//! that target has).

// Helpers of the modules borrowed here that only their other users call.
#![allow(dead_code)]

#[path = "../e2e/agents.rs"]
mod agents;
#[path = "../e2e/agents_git.rs"]
mod agents_git;
#[path = "../e2e/common.rs"]
mod common;
#[path = "../e2e/convergence.rs"]
mod convergence;
#[path = "../e2e/device_names.rs"]
mod device_names;
#[path = "../e2e/drift.rs"]
mod drift;
#[path = "../e2e/first_hour_account.rs"]
mod first_hour_account;
#[path = "../e2e/first_hour_network.rs"]
mod first_hour_network;
#[path = "../e2e/first_hour_rows.rs"]
mod first_hour_rows;
#[path = "../e2e/first_hour_sessions.rs"]
mod first_hour_sessions;
#[path = "../e2e/forget.rs"]
mod forget;
#[path = "../e2e/forget_agents.rs"]
mod forget_agents;
#[path = "../e2e/forget_backup.rs"]
mod forget_backup;
#[path = "../e2e/forget_race.rs"]
mod forget_race;
#[path = "../e2e/handoff.rs"]
mod handoff;
#[path = "../e2e/handoff_git.rs"]
mod handoff_git;
#[path = "../e2e/metadata_audit.rs"]
mod metadata_audit;
#[path = "../e2e/one_session.rs"]
mod one_session;
#[path = "../e2e/pairing.rs"]
mod pairing;
#[path = "../e2e/pg_db.rs"]
mod pg_db;
#[path = "../e2e/redact.rs"]
mod redact;
#[path = "../e2e/replicas.rs"]
mod replicas;
#[path = "../e2e/rewind_sync.rs"]
mod rewind_sync;
#[path = "../e2e/s3.rs"]
mod s3;
#[path = "../e2e/schemathesis.rs"]
mod schemathesis;
#[path = "../e2e/search.rs"]
mod search;
#[path = "../e2e/server_data.rs"]
mod server_data;
#[path = "../e2e/server_rollback.rs"]
mod server_rollback;
#[path = "../e2e/sessions_title.rs"]
mod sessions_title;
#[path = "../e2e/sync.rs"]
mod sync;
#[path = "../e2e/sync_blobs.rs"]
mod sync_blobs;
#[path = "../e2e/sync_conditions.rs"]
mod sync_conditions;
#[path = "../e2e/sync_crash.rs"]
mod sync_crash;
#[path = "../e2e/sync_disk_full.rs"]
mod sync_disk_full;
#[path = "../e2e/sync_faults.rs"]
mod sync_faults;
#[path = "../e2e/sync_interrupted.rs"]
mod sync_interrupted;
#[path = "../e2e/sync_journal.rs"]
mod sync_journal;
#[path = "../e2e/sync_kill.rs"]
mod sync_kill;
#[path = "../e2e/sync_proxy.rs"]
mod sync_proxy;
#[path = "../e2e/sync_server_view.rs"]
mod sync_server_view;
#[path = "../e2e/sync_state.rs"]
mod sync_state;
#[path = "../e2e/sync_tamper.rs"]
mod sync_tamper;
#[path = "../e2e/sync_verify.rs"]
mod sync_verify;
#[path = "../e2e/watch.rs"]
mod watch;
#[path = "../e2e/watch_drift.rs"]
mod watch_drift;
#[path = "../e2e/web.rs"]
mod web;

/// A fresh Postgres database per server.
const BACKEND: pg_db::Backend = pg_db::Backend::Postgres;
