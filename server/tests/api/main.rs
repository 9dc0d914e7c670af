//! Integration tests: each starts the real `evi-server` binary on a free
//! loopback port with a temp data folder and talks to it over HTTP.

mod accounts;
mod blobs;
mod bodies;
mod bucket;
mod bucket_usage;
mod common;
mod crash;
mod crosssite;
mod data_folder;
mod framed;
mod hardening;
mod hygiene;
mod limiter;
mod meta;
mod openapi;
mod operator;
mod pairing;
mod quota;
mod read_ahead;
mod records;
mod s3;
mod secrets;
mod sqlite_only;
mod streams;
mod timeouts;
mod wait;
mod wire;

/// The SQLite file in the data folder, as without `--database`.
const BACKEND: common::Backend = common::Backend::Sqlite;
