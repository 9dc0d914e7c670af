//! What a server stores, read as an operator would, behind its back: the
//! record rows (in `evi-server.sqlite3`, or the server's Postgres database)
//! and the body packs under `bodies/<user id>/<pack>` (in the data folder,
//! or the bucket: the S3 test server keeps each object as a file). Crash
//! tests check what survives a kill here, not what the API chooses to show.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::common::TestServer;

/// Where one server keeps its rows and bodies; see [`TestServer::stores`].
#[derive(Debug, Clone)]
pub struct Stores {
    /// The data folder (the SQLite file is there without a database URL).
    pub data: PathBuf,
    /// The Postgres database, when the server has one.
    pub db: Option<String>,
    /// The folder holding the bucket's objects under the server's prefix,
    /// when bodies go to a bucket.
    pub bucket: Option<PathBuf>,
}

impl TestServer {
    /// Where this server keeps its rows and bodies (a value: it stays right
    /// across restarts).
    pub fn stores(&self) -> Stores {
        Stores {
            data: self.data.path().to_owned(),
            db: self.db.as_ref().map(|d| d.url.clone()),
            bucket: self
                .s3
                .as_ref()
                .map(|(s3, _)| s3.root.path().join(crate::s3::BUCKET).join("server")),
        }
    }
}

impl Stores {
    /// The folder of the body packs, `<user id>/<pack>` under it.
    pub fn bodies(&self) -> PathBuf {
        self.bucket.as_ref().unwrap_or(&self.data).join("bodies")
    }
}

/// One record row's metadata (no body).
#[derive(Debug, Clone)]
pub struct Row {
    pub user: i64,
    pub seq: i64,
    pub kind: String,
    pub entry_ids: Vec<String>,
    /// Where its body is: pack, offset, length (`None` for a body kept in
    /// the row by a server from before packs).
    pub body: Option<(String, u64, u64)>,
}

/// Every record row, in seq order per user. Reads a live server's database
/// too (SQLite in WAL mode, or Postgres: a reader never blocks the writer
/// nor sees half a commit).
pub fn rows(at: &Stores) -> Vec<Row> {
    if let Some(url) = &at.db {
        return crate::pg_db::query(
            url,
            "SELECT user_id, seq, kind, encode(entry_id_bytes, 'hex'), body_pack, body_offset, \
             body_len FROM records ORDER BY user_id, seq",
        )
        .into_iter()
        .map(|r| {
            let int = |i: usize| r[i].as_deref().map(|v| v.parse::<i64>().unwrap());
            let hex = r[3].clone().unwrap_or_default();
            Row {
                user: int(0).unwrap(),
                seq: int(1).unwrap(),
                kind: r[2].clone().unwrap(),
                entry_ids: hex
                    .as_bytes()
                    .chunks(64)
                    .map(|c| String::from_utf8(c.to_vec()).unwrap())
                    .collect(),
                body: r[4]
                    .clone()
                    .map(|p| (p, int(5).unwrap_or(0) as u64, int(6).unwrap_or(0) as u64)),
            }
        })
        .collect();
    }
    let db = rusqlite::Connection::open_with_flags(
        at.data.join("evi-server.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the server's database");
    let mut st = db
        .prepare(
            "SELECT user_id, seq, kind, entry_ids, body_pack, body_offset, body_len,
                    entry_id_bytes
             FROM records ORDER BY user_id, seq",
        )
        .unwrap();
    st.query_map([], |r| {
        let text: String = r.get(3)?;
        // Raw 32-byte MACs since the server's migration 5, hex text before.
        let raw: Option<Vec<u8>> = r.get(7)?;
        let entry_ids = match raw {
            Some(b) => b.chunks(32).map(hex::encode).collect(),
            None => text
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        };
        let pack: Option<String> = r.get(4)?;
        let (offset, len): (Option<i64>, Option<i64>) = (r.get(5)?, r.get(6)?);
        Ok(Row {
            user: r.get(0)?,
            seq: r.get(1)?,
            kind: r.get(2)?,
            entry_ids,
            body: pack.map(|p| (p, offset.unwrap_or(0) as u64, len.unwrap_or(0) as u64)),
        })
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Every pack file, as `(user id, pack name)`.
pub fn packs(at: &Stores) -> BTreeSet<(i64, String)> {
    let mut out = BTreeSet::new();
    let Ok(users) = std::fs::read_dir(at.bodies()) else {
        return out;
    };
    for user in users {
        let user = user.unwrap();
        let Some(id) = user.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        for pack in std::fs::read_dir(user.path()).unwrap() {
            out.insert((id, pack.unwrap().file_name().to_string_lossy().into_owned()));
        }
    }
    out
}

/// The file of one pack (in the data folder, or the bucket's object).
pub fn pack_path(at: &Stores, user: i64, pack: &str) -> PathBuf {
    at.bodies().join(user.to_string()).join(pack)
}

/// No row points at a missing body: each row's pack exists and holds the
/// bytes the row points at. Returns the rows.
pub fn assert_every_row_has_its_body(at: &Stores, what: &str) -> Vec<Row> {
    let rows = rows(at);
    for r in &rows {
        let Some((pack, offset, len)) = &r.body else {
            continue;
        };
        let path = pack_path(at, r.user, pack);
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| {
                panic!(
                    "{what}: record {} points at a missing pack {}: {e}",
                    r.seq,
                    path.display()
                )
            })
            .len();
        assert!(
            size >= offset + len,
            "{what}: record {} wants {len} bytes at {offset} of pack {pack}, which holds {size}",
            r.seq
        );
    }
    rows
}

/// Packs no row points at.
pub fn orphans(at: &Stores) -> BTreeSet<(i64, String)> {
    let referenced: BTreeSet<(i64, String)> = rows(at)
        .into_iter()
        .filter_map(|r| r.body.map(|(p, _, _)| (r.user, p)))
        .collect();
    packs(at).difference(&referenced).cloned().collect()
}

/// Keyed entry id → how many rows hold it.
pub fn entry_counts(rows: &[Row]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        for id in &r.entry_ids {
            *out.entry(id.clone()).or_default() += 1;
        }
    }
    out
}

/// The id of the account `name`.
pub fn user_id(at: &Stores, name: &str) -> i64 {
    if let Some(url) = &at.db {
        let rows = crate::pg_db::query(url, &format!("SELECT id FROM users WHERE name = '{name}'"));
        let id = rows.first().and_then(|r| r[0].as_deref());
        return id
            .unwrap_or_else(|| panic!("no account {name:?}"))
            .parse()
            .unwrap();
    }
    let db = rusqlite::Connection::open_with_flags(
        at.data.join("evi-server.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the server's database");
    db.query_row("SELECT id FROM users WHERE name = ?1", [name], |r| r.get(0))
        .unwrap_or_else(|e| panic!("no account {name:?}: {e}"))
}

/// Rows that hold entries an earlier row holds already, in two kinds: seqs
/// of rows all of whose entries were known (which merge by entry id must
/// drop), and seqs of rows mixing known entries with new ones.
pub fn repeating_rows(rows: &[Row]) -> (Vec<i64>, Vec<i64>) {
    let mut seen = std::collections::HashSet::new();
    let (mut all_known, mut mixed) = (Vec::new(), Vec::new());
    let mut by_seq: Vec<&Row> = rows.iter().collect();
    by_seq.sort_by_key(|r| (r.user, r.seq));
    for r in by_seq {
        let known = r
            .entry_ids
            .iter()
            .filter(|id| seen.contains(&(r.user, id.as_str())))
            .count();
        if known == r.entry_ids.len() && known > 0 {
            all_known.push(r.seq);
        } else if known > 0 {
            mixed.push(r.seq);
        }
        seen.extend(r.entry_ids.iter().map(|id| (r.user, id.as_str())));
    }
    (all_known, mixed)
}

/// Renames every pack no row points at to a pack name (a ULID) two hours
/// older, as if it had lain there since: the start-up sweep removes only
/// orphans older than the server's `ORPHAN_MIN_AGE`. Call only while no
/// push is in flight (an unreferenced pack of a running push is not an
/// orphan). Returns the new names.
pub fn backdate_orphans(at: &Stores) -> BTreeSet<(i64, String)> {
    let two_hours_ms = 2 * 60 * 60 * 1000;
    let mut out = BTreeSet::new();
    for (user, pack) in orphans(at) {
        let Ok(id) = ulid::Ulid::from_string(&pack) else {
            continue;
        };
        let old = ulid::Ulid::from_parts(id.timestamp_ms() - two_hours_ms, id.random());
        let name = old.to_string();
        std::fs::rename(pack_path(at, user, &pack), pack_path(at, user, &name)).unwrap();
        out.insert((user, name));
    }
    out
}

/// Runs `sql` on the server's database behind its back (the SQLite file or
/// its Postgres database; both schemas name tables and columns alike), as
/// a restore of an older database or a bad hand would change it. Call with
/// the server stopped.
pub fn execute(at: &Stores, sql: &str) {
    match &at.db {
        Some(url) => {
            crate::pg_db::query(url, sql);
        }
        None => rusqlite::Connection::open(at.data.join("evi-server.sqlite3"))
            .unwrap()
            .execute_batch(sql)
            .unwrap(),
    }
}
