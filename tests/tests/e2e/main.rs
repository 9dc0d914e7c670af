//! One end-to-end test binary (one link step), a module per area. Every test
//! drives the real `evi` binary against its own throwaway eVi home.

mod agents;
mod agents_git;
mod common;
mod convergence;
mod deploy;
mod device_names;
mod drift;
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
mod link;
mod metadata_audit;
mod migrate;
mod one_session;
mod pairing;
mod pg_db;
mod redact;
mod rewind;
mod rewind_sync;
mod s3;
mod schemathesis;
mod search;
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

/// The SQLite file in each server's data folder.
const BACKEND: pg_db::Backend = pg_db::Backend::Sqlite;
