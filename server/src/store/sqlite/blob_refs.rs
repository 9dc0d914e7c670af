//! The SQLite side of [`crate::store::blob_refs`]: run inside the push's
//! transaction on the writer connection, or as the collection's own steps.

use std::collections::{BTreeSet, HashSet};

use evi_shared::KeyedId;
use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::forget::PurgedRow;
use crate::store::forget::Purged;
use crate::store::{StoreError, StoreResult, UserId, blob_cost};

/// Whether blob `name` is stored: whole, or as a piece (part or manifest)
/// tied to it (see [`evi_shared::blob_refs`]).
fn stored(tx: &Transaction<'_>, user: UserId, name: &str) -> StoreResult<bool> {
    Ok(tx
        .prepare_cached(
            "SELECT 1 FROM blobs WHERE user_id = ?1 AND (name = ?2 OR part_of = ?2) LIMIT 1",
        )?
        .exists(params![user, name])?)
}

/// Of `names`, the blobs of `user` stored now (whole or in pieces), and of
/// the others those deleted as unreferenced (listed for collection: see
/// [`crate::store::blob_refs`]).
pub(super) fn stored_and_listed<'a>(
    tx: &Transaction<'_>,
    user: UserId,
    names: impl Iterator<Item = &'a str>,
) -> StoreResult<(HashSet<String>, HashSet<String>)> {
    let mut listed =
        tx.prepare_cached("SELECT 1 FROM blob_collections WHERE user_id = ?1 AND name = ?2")?;
    let (mut stored_now, mut deleted) = (HashSet::new(), HashSet::new());
    for n in names {
        if stored_now.contains(n) || deleted.contains(n) {
            continue;
        }
        if stored(tx, user, n)? {
            stored_now.insert(n.to_owned());
        } else if listed.exists(params![user, n])? {
            deleted.insert(n.to_owned());
        }
    }
    Ok((stored_now, deleted))
}

/// Records that record `seq` refers to `refs`.
pub(super) fn insert(
    tx: &Transaction<'_>,
    user: UserId,
    seq: i64,
    refs: &[&KeyedId],
) -> StoreResult<()> {
    let mut st = tx.prepare_cached(
        "INSERT OR IGNORE INTO blob_refs (user_id, seq, name) VALUES (?1, ?2, ?3)",
    )?;
    for r in refs {
        st.execute(params![user, seq, r.as_str()])?;
    }
    Ok(())
}

/// Deletes the references of record `seq`; the names they held.
pub(super) fn release(
    tx: &Transaction<'_>,
    user: UserId,
    seq: i64,
    names: &mut BTreeSet<String>,
) -> StoreResult<()> {
    let mut st =
        tx.prepare_cached("DELETE FROM blob_refs WHERE user_id = ?1 AND seq = ?2 RETURNING name")?;
    let gone = st.query_map(params![user, seq], |r| r.get::<_, String>(0))?;
    for n in gone {
        names.insert(n?);
    }
    Ok(())
}

/// After the `forget-lines` record `seq` of `stream` was inserted: deletes
/// the stream's records before it that hold any of `forgets` (whole: the
/// device that forgot sends the lines it kept again), their entry ids,
/// damaged marks and references; lists their packs for compaction.
pub(super) fn forget_lines(
    tx: &Transaction<'_>,
    user: UserId,
    stream: &str,
    seq: i64,
    forgets: &[KeyedId],
) -> StoreResult<Purged> {
    let forgets: BTreeSet<&KeyedId> = forgets.iter().collect();
    let rows: Vec<PurgedRow> = tx
        .prepare_cached(
            "SELECT seq, entry_ids, entry_id_bytes, COALESCE(body_len, length(ciphertext)), body_pack
             FROM records WHERE user_id = ?1 AND stream = ?2 AND seq < ?3 AND kind NOT IN (?4, ?5, ?6)",
        )?
        .query_map(
            params![user, stream, seq, FORGET_KIND, UNFORGET_KIND, evi_shared::blob_refs::FORGET_LINES_KIND],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?
        .collect::<Result<_, _>>()?;
    let mut holding = Vec::new();
    for row in rows {
        let ids = super::split_ids(row.2.clone(), &row.1)?;
        if ids.iter().any(|id| forgets.contains(id)) {
            holding.push(row);
        }
    }
    // The names those records held are not listed: the lines kept from
    // them come again, with their references (see `blob_refs`).
    super::forget::delete_records(tx, user, holding, &mut BTreeSet::new())
}

/// Lists for collection each of `names` that is stored (whole or in
/// pieces) and that no record refers to; whether any was listed.
pub(super) fn list_unreferenced(
    tx: &Transaction<'_>,
    user: UserId,
    names: &BTreeSet<String>,
) -> StoreResult<bool> {
    let mut listed = false;
    for n in names {
        let referred = tx
            .prepare_cached("SELECT 1 FROM blob_refs WHERE user_id = ?1 AND name = ?2")?
            .exists(params![user, n])?;
        if !referred && stored(tx, user, n)? {
            tx.execute(
                "INSERT INTO blob_collections (user_id, name, done_at) VALUES (?1, ?2, NULL)
                 ON CONFLICT (user_id, name) DO UPDATE SET done_at = NULL",
                params![user, n],
            )?;
            listed = true;
        }
    }
    Ok(listed)
}

/// Whether an upload that began at `since_ms` may record blob `name` now
/// (see [`crate::store::blob_refs::upload_allowed`]).
pub(super) fn upload_allowed(
    tx: &Transaction<'_>,
    user: UserId,
    name: &str,
    since_ms: i64,
) -> StoreResult<bool> {
    let listed: Option<Option<i64>> = tx
        .prepare_cached("SELECT done_at FROM blob_collections WHERE user_id = ?1 AND name = ?2")?
        .query_row(params![user, name], |r| r.get(0))
        .optional()?;
    Ok(listed.is_none_or(|done| crate::store::blob_refs::upload_allowed(done, since_ms)))
}

fn parse_name(s: String) -> StoreResult<KeyedId> {
    s.parse()
        .map_err(|e| StoreError::Backend(format!("corrupt blob name: {e}")))
}

/// The listed blobs not collected yet; drops listings done long ago.
pub(super) fn to_collect(c: &Connection, now_ms: i64) -> StoreResult<Vec<(UserId, KeyedId)>> {
    c.execute(
        "DELETE FROM blob_collections WHERE done_at IS NOT NULL AND done_at < ?1",
        [now_ms - crate::store::blob_refs::KEEP_DONE_MS],
    )?;
    let mut st =
        c.prepare_cached("SELECT user_id, name FROM blob_collections WHERE done_at IS NULL")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, UserId>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (user, name) = row?;
        out.push((user, parse_name(name)?));
    }
    Ok(out)
}

/// The collection's first step for `name`: deletes its row, and those of
/// the pieces tied to it, if nothing refers to it (taking them off the
/// counters), and lists each piece so that its bytes are removed even after
/// a kill right after this step. `None` when a record refers to it again:
/// the listing is dropped and the bytes stay.
pub(super) fn take_row(
    c: &mut Connection,
    user: UserId,
    name: &KeyedId,
) -> StoreResult<Option<Vec<KeyedId>>> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let referred = tx
        .prepare_cached("SELECT 1 FROM blob_refs WHERE user_id = ?1 AND name = ?2")?
        .exists(params![user, name.as_str()])?;
    if referred {
        tx.execute(
            "DELETE FROM blob_collections WHERE user_id = ?1 AND name = ?2",
            params![user, name.as_str()],
        )?;
        tx.commit()?;
        return Ok(None);
    }
    let rows: Vec<(String, i64)> = tx
        .prepare_cached(
            "DELETE FROM blobs WHERE user_id = ?1 AND (name = ?2 OR part_of = ?2)
             RETURNING name, size",
        )?
        .query_map(params![user, name.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let freed: i64 = rows.iter().map(|(_, s)| blob_cost(*s as u64) as i64).sum();
    uncount_blobs(&tx, user, rows.len(), freed)?;
    let mut pieces = Vec::new();
    for (n, _) in rows {
        if n == name.as_str() {
            continue;
        }
        tx.execute(
            "INSERT INTO blob_collections (user_id, name, done_at) VALUES (?1, ?2, NULL)
             ON CONFLICT (user_id, name) DO UPDATE SET done_at = NULL",
            params![user, n],
        )?;
        pieces.push(parse_name(n)?);
    }
    tx.commit()?;
    Ok(Some(pieces))
}

/// The collection's last step: the bytes are gone.
pub(super) fn mark_done(
    c: &mut Connection,
    user: UserId,
    name: &KeyedId,
    now_ms: i64,
) -> StoreResult<()> {
    c.execute(
        "UPDATE blob_collections SET done_at = ?1 WHERE user_id = ?2 AND name = ?3",
        params![now_ms, user, name.as_str()],
    )?;
    Ok(())
}

/// Takes `count` deleted blobs of `freed` cost off the account's counters
/// (nothing when none went), in the transaction that deleted them.
pub(super) fn uncount_blobs(
    c: &Connection,
    user: UserId,
    count: usize,
    freed: i64,
) -> rusqlite::Result<()> {
    if count > 0 {
        c.execute(
            "UPDATE users SET blob_count = blob_count - ?1, bytes_used = bytes_used - ?2
             WHERE id = ?3",
            params![count as i64, freed, user],
        )?;
    }
    Ok(())
}
