//! Postgres behind [`Store`]: what several identical replicas share.
//!
//! Driver: `tokio-postgres` with a `deadpool-postgres` pool and rustls for
//! TLS. sqlx (runtime queries, its migrator, `PgListener`) was the first
//! choice, but every sqlx 0.8 release declares `libsqlite3-sys` 0.30 (even
//! with its SQLite feature off, Cargo resolves the `links` key), which
//! clashes with the 0.35 that rusqlite 0.37 needs in all three crates. The
//! two parts sqlx would have brought are small here: [`migrate`] (an
//! advisory lock and a table of applied versions) and [`listen`] (one
//! connection driven by hand).
//!
//! Semantics are the SQLite store's, method for method; where SQLite gets
//! them from its single writer, this store takes the user's row lock
//! (`SELECT ... FOR UPDATE` on `users`) in every transaction that changes a
//! user's records, blobs, devices or counters, so writers of one user run
//! one after another whichever replica they came through.

use std::str::FromStr as _;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use super::*;

mod accounts;
mod admin;
mod blob_refs;
mod blobs;
pub mod failures;
mod forget;
pub mod listen;
pub mod migrate;
mod pairing;
mod records;
mod rotation;
mod store_impl;
mod tls;

/// The channel the schema's triggers announce every change that ends or
/// changes a wait on (migration 7, see [`listen`]); the payload is the
/// user id alone.
pub const CHANNEL: &str = "evi_changes";

/// Pool size when `--database-pool-size` is not given.
pub const DEFAULT_POOL_SIZE: usize = 10;

/// How long a request waits for a pooled connection before it fails.
const POOL_WAIT: Duration = Duration::from_secs(10);

/// Why the store could not be opened; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "--database is not a usable Postgres URL: {0} (expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
    )]
    BadUrl(String),
    #[error(
        "cannot reach the database at {target}: {source}; check that Postgres runs there and \
         that the URL in --database (EVI_SERVER_DATABASE) names the right host, user and database"
    )]
    Unreachable {
        target: String,
        source: tokio_postgres::Error,
    },
    #[error(
        "the database at {target} was migrated by a newer evi-server (version {found}; this one \
         knows up to {known}); upgrade this one"
    )]
    NewerSchema {
        target: String,
        found: i64,
        known: i64,
    },
    #[error("cannot migrate the database at {target}: {source}")]
    Migrate {
        target: String,
        source: tokio_postgres::Error,
    },
    #[error("cannot set up TLS for the database connection: {0}")]
    Tls(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if e.code() == Some(&SqlState::DISK_FULL) {
            return StoreError::Full;
        }
        // The Display of a driver error is its kind alone ("db error");
        // the server's message says what happened. Neither holds the URL.
        match e.as_db_error() {
            // Postgres shutting down, restarting or refusing connections
            // for now (SQLSTATE class 08, 57P01-57P03): answered 503, so
            // clients retry, as for a connection that broke.
            Some(db) if is_gone(db.code()) => {
                StoreError::Unavailable(format!("postgres: {}", db.message()))
            }
            Some(db) => StoreError::Backend(format!("postgres: {}", db.message())),
            // No answer from the database at all: a closed or refused
            // connection, a timeout.
            None => StoreError::Unavailable(format!("postgres: {e}")),
        }
    }
}

/// Whether a database error says the server is going away or not there yet.
fn is_gone(code: &SqlState) -> bool {
    code.code().starts_with("08")
        || [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code)
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            // No connection within the wait: the database is away or every
            // connection is busy; either way worth a retry soon.
            e @ (deadpool_postgres::PoolError::Timeout(_)
            | deadpool_postgres::PoolError::Closed) => {
                StoreError::Unavailable(format!("postgres pool: {e}"))
            }
            e => StoreError::Backend(format!("postgres pool: {e}")),
        }
    }
}

/// Whether `e` is a unique-key violation (a name or token already there).
fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// Where a URL points, for messages: hosts, port and database, never the
/// user's password.
pub fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("(default database)");
    format!("{}:{port}/{db}", hosts.join(","))
}

/// Whether `url` selects this store (`postgres://` or `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// Parses a `postgres://` URL: its settings, and whether TLS certificates
/// are verified (see [`tls`]). The error never repeats the URL (it may hold
/// a password).
pub fn parse_url(url: &str) -> Result<(tokio_postgres::Config, bool), OpenError> {
    if !is_postgres_url(url) {
        return Err(OpenError::BadUrl(
            "it does not start with postgres:// or postgresql://".to_owned(),
        ));
    }
    let (url, verify) = tls::split_verify(url);
    let config =
        tokio_postgres::Config::from_str(&url).map_err(|e| OpenError::BadUrl(e.to_string()))?;
    if config.get_hosts().is_empty() {
        return Err(OpenError::BadUrl("it names no host".to_owned()));
    }
    Ok((config, verify))
}

/// The Postgres store: a bounded pool, and the URL's parts for the
/// listener's own connection.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    target: String,
}

impl PgStore {
    /// Connects, runs the migrations this binary has (under an advisory
    /// lock), and opens a pool of at most `pool_size` connections.
    pub async fn open(url: &str, pool_size: usize) -> Result<Self, OpenError> {
        let (config, verify) = parse_url(url)?;
        let target = describe(&config);
        let tls = tls::connector(verify)?;
        migrate::run(&config, tls.clone(), &target).await?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                // A connection whose socket closed (a restarted Postgres)
                // is dropped when it comes back to the pool, without the
                // round trip a test query per checkout would cost.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| OpenError::Tls(e.to_string()))?;
        // One connection now, so a wrong password fails the start, not the
        // first request.
        let _first = pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(source) => OpenError::Unreachable {
                target: target.clone(),
                source,
            },
            e => OpenError::Tls(e.to_string()),
        })?;
        Ok(Self {
            pool,
            config,
            tls,
            target,
        })
    }

    /// Where the database is (no password), for log lines.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The URL's settings and TLS, for a connection of its own (the
    /// listener's).
    pub fn connect_parts(
        &self,
    ) -> (
        tokio_postgres::Config,
        tokio_postgres_rustls::MakeRustlsConnect,
    ) {
        (self.config.clone(), self.tls.clone())
    }

    pub(crate) async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        Ok(self.pool.get().await?)
    }
}

/// A record's entry ids as stored: their raw MACs, one after another.
fn entry_key(id: &KeyedId) -> Vec<u8> {
    id.to_bytes().to_vec()
}

fn split_ids(b: &[u8]) -> StoreResult<Vec<KeyedId>> {
    let chunks = b.chunks_exact(32);
    if !chunks.remainder().is_empty() {
        return Err(StoreError::Backend(format!(
            "corrupt entry ids: {} bytes",
            b.len()
        )));
    }
    Ok(chunks
        .map(|c| KeyedId::from_bytes(c.try_into().expect("32-byte chunk")))
        .collect())
}

fn parse_keyed(s: String) -> StoreResult<KeyedId> {
    s.parse()
        .map_err(|e| StoreError::Backend(format!("corrupt id: {e}")))
}

fn parse_pack(s: &str) -> StoreResult<PackName> {
    s.parse()
        .map_err(|e| StoreError::Backend(format!("corrupt record: {e}")))
}

/// Takes the user's row lock for the rest of the transaction.
async fn lock_user(tx: &deadpool_postgres::Transaction<'_>, user: UserId) -> StoreResult<()> {
    tx.query_opt("SELECT 1 FROM users WHERE id = $1 FOR UPDATE", &[&user])
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok(())
}
