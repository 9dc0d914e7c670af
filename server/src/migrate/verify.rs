//! The check a move ends with: the target holds what the source holds. Every
//! table's rows counted on both sides, every account's row and every
//! record's metadata compared field by field, and a SHA-256 of every body
//! and every blob, read back from the target, compared with the source's.

use std::collections::BTreeMap;

use futures_util::TryStreamExt as _;
use sha2::{Digest, Sha256};

use super::{Ends, MigrateError};
use crate::bodies::{BodyRef, PackName};

/// What the check compared.
#[derive(Debug, Default, Clone)]
pub struct Checked {
    /// Rows per table, equal on both sides.
    pub rows: BTreeMap<&'static str, u64>,
    pub records: u64,
    /// Bodies whose SHA-256 matched, and their bytes.
    pub bodies: u64,
    pub body_bytes: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

fn mismatch(what: String) -> MigrateError {
    MigrateError::Mismatch(what)
}

/// A record as both sides can be compared: its metadata and where its body is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    stream: String,
    kind: String,
    entry_ids: Vec<u8>,
    device: Option<String>,
    pack: Option<String>,
    offset: Option<i64>,
    len: Option<i64>,
    inline: Option<Vec<u8>>,
}

pub async fn check(ends: &Ends, say: &dyn Fn(&str)) -> Result<Checked, MigrateError> {
    let mut c = Checked::default();
    for table in super::rows::table_names() {
        let ours: i64 =
            ends.source
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
        let theirs: i64 = ends
            .target
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .get(0);
        if ours != theirs {
            return Err(mismatch(format!(
                "{table} has {ours} rows in the source and {theirs} in the target"
            )));
        }
        c.rows.insert(table, ours as u64);
    }
    check_users(ends).await?;
    check_records(ends, &mut c).await?;
    check_blobs(ends, &mut c).await?;
    say(&format!(
        "checked: {} records, {} bodies ({} bytes) and {} blobs ({} bytes) match",
        c.records, c.bodies, c.body_bytes, c.blobs, c.blob_bytes
    ));
    Ok(c)
}

type UserRow = (
    i64,
    String,
    String,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    i64,
    i64,
    i64,
    i64,
);

async fn check_users(ends: &Ends) -> Result<(), MigrateError> {
    const COLS: &str = "id, name, password_hash, key_check, key_proof_hash, newest_seq, \
                        record_count, entry_count, blob_count, bytes_used";
    let mut stmt = ends
        .source
        .prepare(&format!("SELECT {COLS} FROM users ORDER BY id"))?;
    let ours: Vec<UserRow> = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let theirs: Vec<UserRow> = ends
        .target
        .query(&format!("SELECT {COLS} FROM users ORDER BY id"), &[])
        .await?
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
                r.get(8),
                r.get(9),
            )
        })
        .collect();
    for (a, b) in ours.iter().zip(&theirs) {
        if a != b {
            return Err(mismatch(format!(
                "account {} ({:?}) differs between source and target",
                a.0, a.1
            )));
        }
    }
    Ok(())
}

fn source_meta(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, i64, Meta)> {
    let bytes: Option<Vec<u8>> = r.get(4)?;
    let text: String = r.get(5)?;
    let entry_ids = match bytes {
        Some(b) => b,
        None => text
            .split(',')
            .filter(|s| !s.is_empty())
            .flat_map(|id| hex::decode(id).unwrap_or_default())
            .collect(),
    };
    Ok((
        r.get(0)?,
        r.get(1)?,
        Meta {
            stream: r.get(2)?,
            kind: r.get(3)?,
            entry_ids,
            device: r.get(6)?,
            pack: r.get(7)?,
            offset: r.get(8)?,
            len: r.get(9)?,
            inline: r.get(10)?,
        },
    ))
}

async fn check_records(ends: &Ends, c: &mut Checked) -> Result<(), MigrateError> {
    let mut stmt = ends.source.prepare(
        "SELECT user_id, seq, stream, kind, entry_id_bytes, entry_ids, device_id,
                body_pack, body_offset, body_len,
                CASE WHEN body_pack IS NULL THEN ciphertext END
         FROM records ORDER BY user_id, body_pack, body_offset",
    )?;
    let mut rows = stmt.query([])?;
    // Records of one pack come together (the order above): its bytes are
    // read once on each side.
    let mut pack: Option<(i64, String, Vec<u8>, Vec<u8>)> = None;
    let target_sql = "SELECT stream, kind, entry_id_bytes, device_id, body_pack, body_offset,
                             body_len, ciphertext
                      FROM records WHERE user_id = $1 AND seq = $2";
    let select = ends.target.prepare(target_sql).await?;
    while let Some(r) = rows.next()? {
        let (user, seq, ours) = source_meta(r)?;
        let row = ends
            .target
            .query_opt(&select, &[&user, &seq])
            .await?
            .ok_or_else(|| mismatch(format!("record {seq} of user {user} is not in the target")))?;
        let theirs = Meta {
            stream: row.get(0),
            kind: row.get(1),
            entry_ids: row.get(2),
            device: row.get(3),
            pack: row.get(4),
            offset: row.get(5),
            len: row.get(6),
            inline: row.get(7),
        };
        if ours != theirs {
            return Err(mismatch(format!(
                "record {seq} of user {user} differs between source and target"
            )));
        }
        c.records += 1;
        let body = match (&ours.pack, ours.offset, ours.len, ours.inline.clone()) {
            (Some(name), Some(off), Some(len), _) => {
                let name: PackName = name.parse()?;
                let fresh =
                    !matches!(&pack, Some((u, n, _, _)) if *u == user && n == name.as_str());
                if fresh {
                    let src = tokio::fs::read(ends.source_packs.path(user, &name))
                        .await
                        .map_err(crate::bodies::BodyError::Io)?;
                    let dst = target_pack(ends, user, &name, src.len() as u64).await?;
                    pack = Some((user, name.to_string(), src, dst));
                }
                let (_, _, src, dst) = pack.as_ref().expect("read above");
                let range = off as usize..(off + len) as usize;
                let (Some(a), Some(b)) = (src.get(range.clone()), dst.get(range)) else {
                    return Err(mismatch(format!(
                        "record {seq} of user {user}: pack {name} is shorter than its body"
                    )));
                };
                (Sha256::digest(a), Sha256::digest(b), a.len())
            }
            (_, _, _, Some(inline)) => {
                let theirs = theirs.inline.unwrap_or_default();
                (
                    Sha256::digest(&inline),
                    Sha256::digest(&theirs),
                    inline.len(),
                )
            }
            _ => {
                return Err(mismatch(format!(
                    "record {seq} of user {user} has neither a pack nor an inline body"
                )));
            }
        };
        if body.0 != body.1 {
            return Err(mismatch(format!(
                "the body of record {seq} of user {user} differs in the target (SHA-256)"
            )));
        }
        c.bodies += 1;
        c.body_bytes += body.2 as u64;
    }
    Ok(())
}

/// A whole pack as the target holds it (the source's own folder when the
/// bodies stayed there).
async fn target_pack(
    ends: &Ends,
    user: i64,
    pack: &PackName,
    len: u64,
) -> Result<Vec<u8>, MigrateError> {
    let Some((bodies, _)) = &ends.target_bodies else {
        return Ok(tokio::fs::read(ends.source_packs.path(user, pack))
            .await
            .map_err(crate::bodies::BodyError::Io)?);
    };
    let r = BodyRef {
        pack: pack.clone(),
        offset: 0,
        len,
    };
    let chunks: Vec<_> = bodies
        .open(user, &r)
        .await?
        .try_collect()
        .await
        .map_err(crate::bodies::BodyError::Io)?;
    Ok(chunks.concat())
}

async fn check_blobs(ends: &Ends, c: &mut Checked) -> Result<(), MigrateError> {
    for (user, name, size) in super::blob_rows(&ends.source)? {
        let id: evi_shared::KeyedId = name
            .parse()
            .map_err(|e| MigrateError::Blobs(format!("{name}: {e}")))?;
        let ours = Sha256::digest(
            tokio::fs::read(ends.source_blobs.path(user, &id))
                .await
                .map_err(|e| MigrateError::Blobs(e.to_string()))?,
        );
        let theirs = match &ends.target_bodies {
            None => ours,
            Some((_, blobs)) => {
                let Some((have, stream)) = blobs
                    .open(user, &id)
                    .await
                    .map_err(|e| MigrateError::Blobs(e.to_string()))?
                else {
                    return Err(mismatch(format!(
                        "blob {name} of user {user} is not in the target"
                    )));
                };
                if have != size {
                    return Err(mismatch(format!(
                        "blob {name} of user {user} is {have} bytes in the target, {size} in the source"
                    )));
                }
                let mut h = Sha256::new();
                let mut stream = stream;
                while let Some(chunk) = stream
                    .try_next()
                    .await
                    .map_err(|e| MigrateError::Blobs(e.to_string()))?
                {
                    h.update(&chunk);
                }
                h.finalize()
            }
        };
        if ours != theirs {
            return Err(mismatch(format!(
                "blob {name} of user {user} differs in the target (SHA-256)"
            )));
        }
        c.blobs += 1;
        c.blob_bytes += size;
    }
    Ok(())
}
