//! The SQLite side of [`crate::store::forget`]: run inside the push's (or the
//! compaction's) transaction on the writer connection.

use std::collections::{BTreeSet, HashSet};

use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};
use rusqlite::{Connection, Transaction, params};

use crate::bodies::{BodyRef, PackName};
use crate::store::forget::Purged;
use crate::store::push_plan::EntryKey;
use crate::store::{StoreError, StoreResult, ToCompact, UserId, record_cost};

/// Of `streams`, those of `user` that are forgotten now (as this
/// transaction sees it).
pub(super) fn forgotten_among<'a>(
    tx: &Transaction<'_>,
    user: UserId,
    streams: impl Iterator<Item = &'a str>,
) -> StoreResult<HashSet<String>> {
    let mut st =
        tx.prepare_cached("SELECT 1 FROM forgotten_streams WHERE user_id = ?1 AND stream = ?2")?;
    let mut out = HashSet::new();
    for s in streams {
        if !out.contains(s) && st.exists(params![user, s])? {
            out.insert(s.to_owned());
        }
    }
    Ok(out)
}

/// A record row a forget deletes: seq, entry ids (text and raw forms),
/// body length and pack.
pub(super) type PurgedRow = (i64, String, Option<Vec<u8>>, i64, Option<String>);

/// Deletes the records `rows` with their entry ids, damaged marks and blob
/// references (the names they held into `released`), and lists their packs
/// for compaction: what a forget of a stream and one of journal lines
/// both do to the records they take.
pub(super) fn delete_records(
    tx: &Transaction<'_>,
    user: UserId,
    rows: Vec<PurgedRow>,
    released: &mut BTreeSet<String>,
) -> StoreResult<Purged> {
    let mut purged = Purged::default();
    for (rseq, text, bytes, len, pack) in rows {
        let ids = super::split_ids(bytes, &text)?;
        super::blob_refs::release(tx, user, rseq, released)?;
        let unheld = tx
            .prepare_cached(
                "DELETE FROM entries WHERE user_id = ?1 AND seq = ?2 RETURNING entry_id",
            )?
            .query_map(params![user, rseq], |r| r.get::<_, Vec<u8>>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        purged.entries += unheld.len() as i64;
        // A key of another length is none of a push's.
        (purged.unheld).extend(
            unheld
                .into_iter()
                .filter_map(|k| <EntryKey>::try_from(k).ok()),
        );
        tx.execute(
            "DELETE FROM damaged_records WHERE user_id = ?1 AND seq = ?2",
            params![user, rseq],
        )?;
        tx.execute(
            "DELETE FROM records WHERE user_id = ?1 AND seq = ?2",
            params![user, rseq],
        )?;
        purged.records += 1;
        purged.bytes += record_cost(len as u64, ids.len()) as i64;
        if let Some(pack) = pack {
            tx.execute(
                "INSERT OR IGNORE INTO forget_compactions (user_id, pack) VALUES (?1, ?2)",
                params![user, pack],
            )?;
            purged.packs = true;
        }
    }
    Ok(purged)
}

/// After the tombstone `seq` of `stream` was inserted: deletes the records
/// of the stream and of its group before it (not their tombstones), as
/// [`delete_records`] does, and marks the stream forgotten.
pub(super) fn purge(
    tx: &Transaction<'_>,
    user: UserId,
    stream: &str,
    seq: i64,
    released: &mut BTreeSet<String>,
) -> StoreResult<Purged> {
    let rows: Vec<PurgedRow> = tx
        .prepare_cached(
            "SELECT seq, entry_ids, entry_id_bytes, COALESCE(body_len, length(ciphertext)), body_pack
             FROM records WHERE user_id = ?1 AND (stream = ?2 OR group_stream = ?2) AND seq < ?5
               AND kind NOT IN (?3, ?4)",
        )?
        .query_map(params![user, stream, FORGET_KIND, UNFORGET_KIND, seq], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let purged = delete_records(tx, user, rows, released)?;
    tx.execute(
        "INSERT INTO forgotten_streams (user_id, stream, seq) VALUES (?1, ?2, ?3)
         ON CONFLICT (user_id, stream) DO UPDATE SET seq = excluded.seq",
        params![user, stream, seq],
    )?;
    Ok(purged)
}

/// After an undo of `stream` was inserted: the stream takes records again.
pub(super) fn lift(tx: &Transaction<'_>, user: UserId, stream: &str) -> StoreResult<()> {
    tx.execute(
        "DELETE FROM forgotten_streams WHERE user_id = ?1 AND stream = ?2",
        params![user, stream],
    )?;
    Ok(())
}

fn parse_pack(s: String) -> StoreResult<PackName> {
    s.parse()
        .map_err(|e| StoreError::Backend(format!("corrupt pack name: {e}")))
}

/// Now, in milliseconds since the epoch, by SQLite's clock (the one
/// `repointed_at` is written with).
const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

pub(super) fn packs_to_compact(c: &Connection) -> StoreResult<Vec<ToCompact>> {
    let mut st = c.prepare_cached(&format!(
        "SELECT user_id, pack, repointed_at, {NOW_MS} FROM forget_compactions"
    ))?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, UserId>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (user, pack, at, now) = row?;
        out.push(ToCompact {
            user,
            pack: parse_pack(pack)?,
            repointed_ago: crate::store::repointed_ago(at, now),
        });
    }
    Ok(out)
}

pub(super) fn bodies_in_pack(
    c: &Connection,
    user: UserId,
    pack: &PackName,
) -> StoreResult<Vec<(u64, BodyRef)>> {
    let mut st = c.prepare_cached(
        "SELECT seq, body_offset, body_len FROM records
         WHERE user_id = ?1 AND body_pack = ?2 ORDER BY body_offset",
    )?;
    let rows = st.query_map(params![user, pack.as_str()], |r| {
        Ok((
            r.get::<_, i64>(0)? as u64,
            r.get::<_, i64>(1)? as u64,
            r.get::<_, i64>(2)? as u64,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, offset, len) = row?;
        out.push((
            seq,
            BodyRef {
                pack: pack.clone(),
                offset,
                len,
            },
        ));
    }
    Ok(out)
}

/// Points the moved records (those still in `from`) at their new place;
/// lists the new pack when some of them were deleted meanwhile.
pub(super) fn repoint(
    c: &mut Connection,
    user: UserId,
    from: &PackName,
    moved: &[(u64, BodyRef)],
) -> StoreResult<()> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut st = tx.prepare_cached(
            "UPDATE records SET body_pack = ?1, body_offset = ?2, body_len = ?3
             WHERE user_id = ?4 AND seq = ?5 AND body_pack = ?6",
        )?;
        let mut updated = 0;
        for (seq, to) in moved {
            updated += st.execute(params![
                to.pack.as_str(),
                to.offset as i64,
                to.len as i64,
                user,
                *seq as i64,
                from.as_str()
            ])?;
        }
        // A forget deleted some of them while they were copied: the copy
        // holds their bodies, so it is rewritten in turn.
        if let Some((_, to)) = moved.first()
            && updated < moved.len()
        {
            tx.execute(
                "INSERT OR IGNORE INTO forget_compactions (user_id, pack) VALUES (?1, ?2)",
                params![user, to.pack.as_str()],
            )?;
        }
        tx.execute(
            &format!(
                "UPDATE forget_compactions SET repointed_at = {NOW_MS}
                 WHERE user_id = ?1 AND pack = ?2 AND repointed_at IS NULL"
            ),
            params![user, from.as_str()],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Takes `pack` off the list once it is gone, then checkpoints the
/// write-ahead log down to nothing: the pages a forget changed went
/// through it, and older frames in it may still hold the deleted rows.
/// Best effort: a busy reader only delays the cut to a later forget.
pub(super) fn done(c: &mut Connection, user: UserId, pack: &PackName) -> StoreResult<()> {
    c.execute(
        "DELETE FROM forget_compactions WHERE user_id = ?1 AND pack = ?2",
        params![user, pack.as_str()],
    )?;
    if let Err(e) = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(error = %e, "cannot checkpoint the write-ahead log after a forget");
    }
    Ok(())
}
