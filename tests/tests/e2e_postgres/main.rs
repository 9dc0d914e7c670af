//! The sync suites against Postgres: every started server gets a database
//! of its own on the server `EVI_TEST_POSTGRES_URL` names (skipped, saying
//! so, when it is unset; a failure under `CI=true`). The modules are the
//! SQLite target's that talk to a server only through its API: those that
//! open its SQLite file or copy its data folder as a backup stay there.

// Helpers of the modules borrowed here that only their other users call.
#![allow(dead_code)]

#[path = "../e2e/common.rs"]
mod common;
#[path = "../e2e/device_names.rs"]
mod device_names;
#[path = "../e2e/first_hour_rows.rs"]
mod first_hour_rows;
#[path = "../e2e/handoff.rs"]
mod handoff;
#[path = "../e2e/one_session.rs"]
mod one_session;
#[path = "../e2e/pairing.rs"]
mod pairing;
#[path = "../e2e/pg_db.rs"]
mod pg_db;
#[path = "../e2e/replicas.rs"]
mod replicas;
#[path = "../e2e/s3.rs"]
mod s3;
#[path = "../e2e/sync.rs"]
mod sync;
#[path = "../e2e/sync_blobs.rs"]
mod sync_blobs;
#[path = "../e2e/sync_conditions.rs"]
mod sync_conditions;
#[path = "../e2e/sync_faults.rs"]
mod sync_faults;
#[path = "../e2e/sync_interrupted.rs"]
mod sync_interrupted;
#[path = "../e2e/sync_journal.rs"]
mod sync_journal;
#[path = "../e2e/sync_proxy.rs"]
mod sync_proxy;
#[path = "../e2e/sync_state.rs"]
mod sync_state;
#[path = "../e2e/watch.rs"]
mod watch;

/// A fresh Postgres database per server.
const BACKEND: pg_db::Backend = pg_db::Backend::Postgres;
