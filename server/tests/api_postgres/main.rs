//! The API tests against Postgres: every started server gets a database of
//! its own on the server `EVI_TEST_POSTGRES_URL` names (skipped, saying so,
//! when it is unset; a failure under `CI=true`). The modules are the SQLite
//! target's, less those that open the SQLite file or check what lies in the
//! data folder; [`replicas`] holds what only several servers on one
//! database have.

#[path = "../api/accounts.rs"]
mod accounts;
#[path = "../api/blobs.rs"]
mod blobs;
#[path = "../api/bodies.rs"]
mod bodies;
#[path = "../api/common.rs"]
mod common;
#[path = "../api/crash.rs"]
mod crash;
#[path = "../api/crosssite.rs"]
mod crosssite;
#[path = "../api/framed.rs"]
mod framed;
#[path = "../api/hardening.rs"]
mod hardening;
#[path = "../api/hygiene.rs"]
mod hygiene;
#[path = "../api/limiter.rs"]
mod limiter;
#[path = "../api/meta.rs"]
mod meta;
#[path = "../api/openapi.rs"]
mod openapi;
#[path = "../api/operator.rs"]
mod operator;
#[path = "../api/pairing.rs"]
mod pairing;
#[path = "../api/quota.rs"]
mod quota;
#[path = "../api/read_ahead.rs"]
mod read_ahead;
#[path = "../api/records.rs"]
mod records;
#[path = "../api/secrets.rs"]
mod secrets;
// The bucket behind every server here; its inspection helpers are for
// the SQLite target's bucket tests.
#[allow(dead_code)]
#[path = "../api/s3.rs"]
mod s3;
#[path = "../api/streams.rs"]
mod streams;
#[path = "../api/timeouts.rs"]
mod timeouts;
#[path = "../api/wait.rs"]
mod wait;
#[path = "../api/wire.rs"]
mod wire;

mod blob_race;
mod empty_database;
mod replicas;

/// A fresh Postgres database per server.
const BACKEND: common::Backend = common::Backend::Postgres;
