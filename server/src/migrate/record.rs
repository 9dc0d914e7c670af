//! The record a move leaves in its target (table `moved_in`, Postgres
//! migration 8): begun before anything is copied, finished once the target
//! was checked against the source.
//!
//! - A move into a database with no record and no account begins one.
//! - A move into a database whose record is unfinished goes on where the
//!   interrupted one stopped.
//! - A move into a database whose record is finished is refused, and
//!   changes nothing: that database is the server's now, and copying the
//!   folder into it again (every row `ON CONFLICT DO NOTHING`) would bring
//!   back what was deleted there since: a revoked device, a forgotten
//!   session's records.
//! - A database with accounts and no record is refused too: a server ran
//!   on it, or an evi-server from before this record migrated into it.
//! - A server does not start on a database whose move is unfinished
//!   ([`refuse_unfinished`]): what it changed there, the move run again to
//!   finish would undo.

use super::MigrateError;
use crate::store::postgres::PgStore;

/// A time of the record, as an operator reads it.
fn when(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0).map_or_else(
        || at.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// What [`begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// No move before: this one is recorded as begun.
    New,
    /// An interrupted move of `source`, begun at `started` (as [`when`]
    /// says it): this one goes on with it.
    Resumed { source: String, started: String },
}

/// Records the move of `source` as begun, or finds the interrupted one it
/// goes on with; refuses a finished move and a database with accounts.
pub async fn begin(
    target: &tokio_postgres::Client,
    source: &str,
    now: i64,
) -> Result<Begun, MigrateError> {
    let row = target
        .query_opt("SELECT source, started_at, finished_at FROM moved_in", &[])
        .await?;
    if let Some(r) = row {
        let (from, started, finished): (String, i64, Option<i64>) = (r.get(0), r.get(1), r.get(2));
        return match finished {
            Some(at) => Err(MigrateError::Finished {
                folder: from,
                at: when(at),
            }),
            None => Ok(Begun::Resumed {
                source: from,
                started: when(started),
            }),
        };
    }
    let accounts: i64 = target
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    if accounts > 0 {
        return Err(MigrateError::NotEmpty { accounts });
    }
    let n = target
        .execute(
            "INSERT INTO moved_in (source, started_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&source, &now],
        )
        .await?;
    if n == 0 {
        return Err(MigrateError::Other(anyhow::anyhow!(
            "another migrate into this database began meanwhile; let it finish"
        )));
    }
    Ok(Begun::New)
}

/// Records the move as finished: from now on it is refused again, and
/// servers start on the database.
pub async fn finish(target: &tokio_postgres::Client, now: i64) -> Result<(), MigrateError> {
    target
        .execute(
            "UPDATE moved_in SET finished_at = $1 WHERE finished_at IS NULL",
            &[&now],
        )
        .await?;
    Ok(())
}

/// A move into the database began and did not finish.
#[derive(Debug, thiserror::Error)]
#[error(
    "a migrate of {folder} into this database began at {started} and did not finish: a server \
     started on it now would change what that migrate, run again to finish, then undoes"
)]
pub struct Unfinished {
    /// The data folder it copies.
    pub folder: String,
    pub started: String,
}

/// Refuses a database a move began and did not finish (a server's start).
pub async fn refuse_unfinished(pg: &PgStore) -> anyhow::Result<()> {
    let c = pg.client().await?;
    let row = c
        .query_opt(
            "SELECT source, started_at FROM moved_in WHERE finished_at IS NULL",
            &[],
        )
        .await
        .map_err(crate::store::StoreError::from)?;
    match row {
        None => Ok(()),
        Some(r) => Err(Unfinished {
            folder: r.get(0),
            started: when(r.get(1)),
        }
        .into()),
    }
}
