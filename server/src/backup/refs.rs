//! What a database names outside itself: the body packs and blob files of
//! its live accounts, each with the length it must at least have. Read
//! from a snapshot, never from the live database, so that the list and the
//! rows in the archive are the same instant.

use std::path::{Path, PathBuf};

use evi_shared::KeyedId;
use rusqlite::Connection;

use super::{BackupError, sql};
use crate::bodies::PackName;
use crate::store::UserId;

/// One file a row names, under the folder that holds `bodies/` and `blobs/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct FileRef {
    /// `bodies/<user>/<pack>` or `blobs/<user>/<name>`.
    pub rel: PathBuf,
    /// A pack must be at least this long (the furthest body a row points
    /// into); a blob exactly this long.
    pub len: u64,
    pub exact: bool,
}

/// What a snapshot holds and names.
#[derive(Debug, Default)]
pub(super) struct Refs {
    pub accounts: u64,
    pub records: u64,
    pub packs: Vec<FileRef>,
    pub blobs: Vec<FileRef>,
}

impl Refs {
    /// Reads them from `db`. Retired accounts (a rotation's old one, an
    /// abandoned staging one, one `admin delete` took) are left out: their
    /// files go before their rows, so a snapshot may name files of theirs
    /// already gone, and the next start purges what is left of them.
    pub fn list(db: &Connection) -> Result<Self, BackupError> {
        let what = "cannot list what the database names";
        let count = |q: &str| -> Result<u64, BackupError> {
            db.query_row(q, [], |r| r.get::<_, i64>(0))
                .map(|n| n.max(0) as u64)
                .map_err(sql(what))
        };
        let accounts =
            count("SELECT COUNT(*) FROM users WHERE staging_of IS NULL AND retired_at IS NULL")?;
        let records = count(
            "SELECT COUNT(*) FROM records r JOIN users u ON u.id = r.user_id \
             WHERE u.retired_at IS NULL",
        )?;
        let packs = file_refs(
            db,
            "SELECT r.user_id, r.body_pack, MAX(r.body_offset + r.body_len) \
             FROM records r JOIN users u ON u.id = r.user_id \
             WHERE r.body_pack IS NOT NULL AND u.retired_at IS NULL \
             GROUP BY r.user_id, r.body_pack ORDER BY r.user_id, r.body_pack",
            |user, pack, end| {
                pack.parse::<PackName>().map_err(|_| {
                    BackupError::Damaged(format!(
                        "a record of user {user} names the body pack {pack:?}, which is no pack name"
                    ))
                })?;
                Ok(FileRef {
                    rel: Path::new("bodies").join(user.to_string()).join(pack),
                    len: end.max(0) as u64,
                    exact: false,
                })
            },
        )?;
        // Every blob row is a file: a blob sent whole, or a part or the
        // manifest of one sent in parts (`part_of` names its whole).
        let blobs = file_refs(
            db,
            "SELECT b.user_id, b.name, b.size FROM blobs b JOIN users u ON u.id = b.user_id \
             WHERE u.retired_at IS NULL ORDER BY b.user_id, b.name",
            |user, name, size| {
                name.parse::<KeyedId>().map_err(|_| {
                    BackupError::Damaged(format!(
                        "user {user} has a blob row named {name:?}, which is no blob name"
                    ))
                })?;
                Ok(FileRef {
                    rel: Path::new("blobs").join(user.to_string()).join(name),
                    len: size.max(0) as u64,
                    exact: true,
                })
            },
        )?;
        Ok(Self {
            accounts,
            records,
            packs,
            blobs,
        })
    }

    /// Every file, packs first.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.packs.iter().chain(&self.blobs)
    }
}

/// The files the rows of `query` (user id, file name, length) name, each
/// made by `file` once its user id is known to be one.
fn file_refs(
    db: &Connection,
    query: &str,
    file: impl Fn(UserId, &str, i64) -> Result<FileRef, BackupError>,
) -> Result<Vec<FileRef>, BackupError> {
    let what = "cannot list what the database names";
    let mut st = db.prepare(query).map_err(sql(what))?;
    st.query_map([], |r| {
        Ok((
            r.get::<_, UserId>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })
    .map_err(sql(what))?
    .map(|row| {
        let (user, name, len) = row.map_err(sql(what))?;
        check_user(user)?;
        file(user, &name, len)
    })
    .collect()
}

/// A user id is a folder name: only a positive number may become one.
fn check_user(user: UserId) -> Result<(), BackupError> {
    if user <= 0 {
        return Err(BackupError::Damaged(format!(
            "the database names files of user id {user}, which is no user id"
        )));
    }
    Ok(())
}

/// How a file on disk falls short of what its row says, if it does.
pub(super) fn short(f: &FileRef, found: u64) -> Option<String> {
    if f.exact && found != f.len {
        return Some(format!(
            "{} is {found} bytes, and its row says {}",
            f.rel.display(),
            f.len
        ));
    }
    if !f.exact && found < f.len {
        return Some(format!(
            "{} is {found} bytes, and a record's body ends at byte {}",
            f.rel.display(),
            f.len
        ));
    }
    None
}
