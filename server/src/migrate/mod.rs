//! `evi-server migrate --data DIR --to-database URL [--to-store URL]`: moves
//! a server off the embedded store, into Postgres (and object storage), so
//! that its devices sync on against the new server with the tokens and
//! cursors they have: accounts, devices with their hashed tokens, invites,
//! records with their seqs and entry ids, damage marks and blob rows are
//! copied as they are, and bodies and blobs keep their names (a record's
//! body is at the same offset of the same pack).
//!
//! The order is the server's own durability order: bodies and blobs are
//! stored in the target first, then the rows that point at them, so an
//! interrupted move never leaves a row in the target naming a missing
//! body. Running it again goes on where it stopped: a pack or blob already
//! in the target is not sent again, and a row already there is kept
//! (`ON CONFLICT DO NOTHING`). It ends by checking the target against the
//! source: the rows of every table counted, every record's metadata
//! compared, and a SHA-256 of every body and blob read back from the target.
//!
//! A move happens once: the target records it as begun before anything is
//! copied and as finished after the check ([`record`]). A finished move is
//! not run again (that would bring back what the new server deleted since:
//! a revoked device, a forgotten session), and no server starts on a
//! target whose move is unfinished.
//!
//! The source is read under the data folder's lock, so the embedded server
//! must be stopped (its devices too, or what they push meanwhile is not
//! moved; they would send it again to the new server, by entry id).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::blobs::{BlobDir, BlobStore};
use crate::bodies::packs::PackDir;
use crate::bodies::{BodyStore, PackName};
use crate::store::UserId;
use crate::store::postgres::PgStore;

pub mod record;
mod rows;
mod verify;

pub use verify::Checked;

/// What to move where.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// The embedded server's data folder.
    pub data_dir: PathBuf,
    /// `postgres://…` of the target.
    pub to_database: String,
    /// `s3://…` or `file:///…` for bodies and blobs; `None` leaves them in
    /// the data folder, where the new server (run with `--data` on the same
    /// folder) reads them.
    pub to_store: Option<String>,
    /// A test hook (see [`crate::fault`]); always `None` in a build without
    /// the `test-hooks` feature.
    pub fault: Option<crate::fault::Fault>,
}

/// Why a move stopped; each says what to do ([`MigrateError::hint`]). An
/// interruption leaves nothing wrong in the target: running the move again
/// goes on. A target that does not match after the copy is not a copy of
/// the source, and a move into it starts over.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Locked(#[from] crate::datalock::DataLockError),
    #[error(
        "no embedded database in {0}: point --data at the folder the server ran on \
         (it holds evi-server.sqlite3)"
    )]
    NoSource(PathBuf),
    #[error("cannot read the embedded database: {0}")]
    Source(#[from] rusqlite::Error),
    #[error("{0}")]
    Target(#[from] crate::store::postgres::OpenError),
    #[error("the target database: {0}")]
    Database(#[from] tokio_postgres::Error),
    #[error(
        "the target database already holds an account that is not this server's \
         (id {id}, {name:?}): migrate into an empty database, or one only an \
         interrupted migrate of this folder wrote to"
    )]
    Foreign { id: i64, name: String },
    #[error("body storage: {0}")]
    Bodies(#[from] crate::bodies::BodyError),
    #[error("blob storage: {0}")]
    Blobs(String),
    #[error(
        "the target database already holds the finished migrate of {folder} (at {at}): it is \
         that server's database now, and copying the folder into it again would bring back \
         what was deleted there since (revoked devices, forgotten sessions); nothing was changed"
    )]
    Finished { folder: String, at: String },
    #[error(
        "the target database holds {accounts} accounts and no migrate began there (a server ran \
         on it, or an evi-server older than this one migrated into it and left no record): \
         nothing was changed"
    )]
    NotEmpty { accounts: i64 },
    #[error("{0}")]
    Other(#[from] anyhow::Error),
    #[error(
        "the target does not match the source after the copy: {0}; the move is not finished, \
         and no server starts on the target"
    )]
    Mismatch(String),
}

impl MigrateError {
    /// What the operator does next.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            MigrateError::Locked(_) => {
                "stop the server on this data folder first (and its devices), then run \
                 migrate again"
            }
            MigrateError::NoSource(_) | MigrateError::Source(_) => return None,
            MigrateError::Finished { .. } => {
                "the devices sync with the server on that database; to move this folder again, \
                 migrate into a new, empty database (and store)"
            }
            MigrateError::NotEmpty { .. } | MigrateError::Foreign { .. } => {
                "migrate into a new, empty database (createdb), with a store prefix of its own"
            }
            MigrateError::Mismatch(_) => {
                "start over into a new, empty database and an empty store prefix: run migrate \
                 again there (the data folder is untouched)"
            }
            MigrateError::Target(_)
            | MigrateError::Database(_)
            | MigrateError::Bodies(_)
            | MigrateError::Blobs(_)
            | MigrateError::Other(_) => {
                "once that is fixed, run the same migrate again: it goes on where it stopped \
                 (no server starts on the target until it has finished)"
            }
        })
    }
}

/// What a move did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Rows copied per table (new in the target, this run).
    pub rows: BTreeMap<&'static str, u64>,
    pub packs_copied: u64,
    pub packs_present: u64,
    pub pack_bytes_copied: u64,
    pub blobs_copied: u64,
    pub blobs_present: u64,
    pub blob_bytes_copied: u64,
    pub checked: Checked,
}

/// The stores on both sides.
struct Ends {
    source: rusqlite::Connection,
    source_packs: PackDir,
    source_blobs: BlobDir,
    target: tokio_postgres::Client,
    /// `None` when bodies and blobs stay in the data folder.
    target_bodies: Option<(Arc<dyn BodyStore>, Arc<dyn BlobStore>)>,
}

/// Moves the server in `opts.data_dir`; `say` gets a line per step.
pub async fn migrate(opts: &MigrateOptions, say: &dyn Fn(&str)) -> Result<Report, MigrateError> {
    let _lock = crate::datalock::DataLock::acquire(&opts.data_dir)?;
    let mut config = crate::Config::new(opts.data_dir.clone());
    let db = config.db_path();
    if !db.is_file() {
        return Err(MigrateError::NoSource(opts.data_dir.clone()));
    }
    // Brings the source to the newest schema this binary knows, as its
    // start would: the copy reads that one.
    crate::store::sqlite::SqliteStore::open(&db)
        .map_err(|e| anyhow::anyhow!("cannot open the embedded database {}: {e}", db.display()))?;
    let source = rusqlite::Connection::open_with_flags(
        &db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    say(&format!("source: {}", db.display()));
    let pg = PgStore::open(&opts.to_database, 2).await?;
    say(&format!(
        "target database: {} (schema migrated)",
        pg.target()
    ));
    let (pg_config, tls) = pg.connect_parts();
    let (target, conn) = pg_config.connect(tls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let target_bodies = match &opts.to_store {
        None => None,
        Some(url) => {
            config.store = Some(url.clone());
            config.database = Some(opts.to_database.clone());
            let stores = crate::storage::open_stores(&config).await?;
            say(&format!("target store: {url}"));
            Some((stores.bodies, stores.blobs))
        }
    };
    let source_dir = crate::Config::new(opts.data_dir.clone());
    let ends = Ends {
        source,
        source_packs: PackDir::open(source_dir.bodies_dir())
            .map_err(crate::bodies::BodyError::Io)?,
        source_blobs: BlobDir::open(source_dir.blobs_dir())
            .map_err(|e| MigrateError::Blobs(e.to_string()))?,
        target,
        target_bodies,
    };
    let source = std::path::absolute(&opts.data_dir).unwrap_or_else(|_| opts.data_dir.clone());
    match record::begin(&ends.target, &source.display().to_string(), now()).await? {
        record::Begun::New => say("target: empty; the move is recorded as begun"),
        record::Begun::Resumed { source, started } => say(&format!(
            "target: the migrate of {source} begun at {started} did not finish; going on"
        )),
    }
    rows::refuse_foreign_accounts(&ends).await?;
    let mut report = Report::default();
    if let Some((bodies, blobs)) = &ends.target_bodies {
        copy_packs(&ends, bodies.as_ref(), &mut report, say).await?;
        copy_blobs(&ends, blobs.as_ref(), &mut report, say).await?;
    }
    rows::copy_all(&ends, &mut report, say, opts.fault).await?;
    report.checked = verify::check(&ends, say).await?;
    record::finish(&ends.target, now()).await?;
    say("target: the move is recorded as finished; servers may start on it");
    Ok(report)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The packs some record of the source points at, by owner.
fn referenced_packs(
    source: &rusqlite::Connection,
) -> Result<Vec<(UserId, PackName)>, MigrateError> {
    let mut stmt = source.prepare(
        "SELECT DISTINCT user_id, body_pack FROM records WHERE body_pack IS NOT NULL
         ORDER BY user_id, body_pack",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (user, pack) = row?;
        let pack: PackName = pack.parse()?;
        out.push((user, pack));
    }
    Ok(out)
}

async fn copy_packs(
    ends: &Ends,
    bodies: &dyn BodyStore,
    report: &mut Report,
    say: &dyn Fn(&str),
) -> Result<(), MigrateError> {
    let wanted = referenced_packs(&ends.source)?;
    let present: HashSet<(UserId, PackName)> = bodies.list_packs().await?.into_iter().collect();
    say(&format!(
        "packs: {} referenced, {} already in the target",
        wanted.len(),
        wanted.iter().filter(|p| present.contains(p)).count()
    ));
    for (user, pack) in wanted {
        if present.contains(&(user, pack.clone())) {
            report.packs_present += 1;
            continue;
        }
        let bytes = tokio::fs::read(ends.source_packs.path(user, &pack))
            .await
            .map_err(crate::bodies::BodyError::Io)?;
        report.pack_bytes_copied += bytes.len() as u64;
        bodies.put_pack(user, &pack, bytes.into()).await?;
        report.packs_copied += 1;
    }
    Ok(())
}

/// The source's blob rows: (user, name, size).
fn blob_rows(source: &rusqlite::Connection) -> Result<Vec<(UserId, String, u64)>, MigrateError> {
    let mut stmt =
        source.prepare("SELECT user_id, name, size FROM blobs ORDER BY user_id, name")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)? as u64,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

async fn copy_blobs(
    ends: &Ends,
    blobs: &dyn BlobStore,
    report: &mut Report,
    say: &dyn Fn(&str),
) -> Result<(), MigrateError> {
    let rows = blob_rows(&ends.source)?;
    say(&format!("blobs: {}", rows.len()));
    let blob_err = |e: &dyn std::fmt::Display| MigrateError::Blobs(e.to_string());
    for (user, name, size) in rows {
        let id: evi_shared::KeyedId = name.parse().map_err(|e| blob_err(&e))?;
        if let Some((have, _)) = blobs.open(user, &id).await.map_err(|e| blob_err(&e))?
            && have == size
        {
            report.blobs_present += 1;
            continue;
        }
        let file = tokio::fs::File::open(ends.source_blobs.path(user, &id))
            .await
            .map_err(|e| blob_err(&e))?;
        let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file));
        let placed = blobs
            .receive(user, &id, body, size)
            .await
            .map_err(|e| blob_err(&e))?;
        if placed.size != size {
            return Err(MigrateError::Mismatch(format!(
                "blob {name} of user {user} is {} bytes in the target, {size} in the source",
                placed.size
            )));
        }
        report.blobs_copied += 1;
        report.blob_bytes_copied += size;
    }
    Ok(())
}
