//! Records: push (seqs, quota, damaged rows), pull and the reads around them.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::*;
use crate::store::push_plan::{self, Facts, Planner, Step};

/// Executes the plan of [`push_plan`], whose rules these are, step by step
/// on the writer connection.
///
/// One immediate transaction: it takes SQLite's write lock before the first
/// read, so the facts read stay true until it commits, and the single
/// writer makes commit order equal seq order. A purge runs inline, right
/// after its record's row, as the plan orders.
pub(super) async fn push(
    s: &SqliteStore,
    user: UserId,
    records: Vec<NewRecord>,
    quota: Option<u64>,
    per_item: bool,
) -> StoreResult<PushOutcome> {
    s.write(move |c| {
        let now = chrono::Utc::now().timestamp();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let keys = push_plan::entry_keys(&records);
        let facts = push_facts(&tx, user, &records, &keys, quota, per_item)?;
        let mut plan = Planner::new(&records, keys, facts);
        let mut new_entries = 0i64;
        {
            let mut ins_rec = tx.prepare_cached(
                "INSERT INTO records (user_id, seq, stream, kind, entry_ids, entry_id_bytes,
                 ciphertext, created_at, device_id, body_pack, body_offset, body_len,
                 group_stream)
                 VALUES (?1, ?2, ?3, ?4, '', ?5, x'', ?6, ?7, ?8, ?9, ?10, ?11)",
            )?;
            let mut ins_entry = tx.prepare_cached(
                "INSERT OR IGNORE INTO entries (user_id, entry_id, seq) VALUES (?1, ?2, ?3)",
            )?;
            while let Some(step) = plan.next_step()? {
                match step {
                    Step::Store(t) => {
                        let r = t.record;
                        ins_rec.execute(params![
                            user,
                            t.seq,
                            r.stream.as_str(),
                            r.kind,
                            t.ids,
                            now,
                            r.device_id,
                            r.body.pack.as_str(),
                            r.body.offset as i64,
                            r.body.len as i64,
                            r.group.as_ref().map(KeyedId::as_str),
                        ])?;
                        for k in &t.new_ids {
                            new_entries += ins_entry.execute(params![user, &k[..], t.seq])? as i64;
                        }
                        blob_refs::insert(&tx, user, t.seq, &t.refs)?;
                    }
                    Step::Forget { stream, seq } => {
                        let purged = forget::purge(&tx, user, stream, seq, plan.released())?;
                        plan.purged(purged);
                    }
                    Step::Unforget { stream } => forget::lift(&tx, user, stream)?,
                    Step::ForgetLines {
                        stream,
                        seq,
                        forgets,
                    } => {
                        plan.purged(blob_refs::forget_lines(&tx, user, stream, seq, forgets)?);
                    }
                    Step::DropSuperseded => {
                        let (gone, freed) = drop_superseded(&tx, user, plan.released())?;
                        plan.superseded(gone, freed);
                    }
                }
            }
        }
        if !plan.stored() {
            // Nothing to keep: dropping the transaction ends it.
            return Ok(plan.outcome(false));
        }
        let collect_blobs = blob_refs::list_unreferenced(&tx, user, plan.released())?;
        let n = plan.counters(new_entries);
        tx.execute(
            "UPDATE users SET newest_seq = ?1, record_count = record_count + ?2,
             entry_count = entry_count + ?3, bytes_used = bytes_used + ?4 WHERE id = ?5",
            params![n.newest_seq, n.records, n.entries, n.bytes, user],
        )?;
        tx.commit()?;
        Ok(plan.outcome(collect_blobs))
    })
    .await
}

/// What [`push_plan`] decides from, read in the push's transaction: a
/// look-up per key [`push_plan::held_among`] asks for, per stream, per
/// blob name.
fn push_facts(
    tx: &rusqlite::Transaction<'_>,
    user: UserId,
    records: &[NewRecord],
    keys: &[Vec<push_plan::EntryKey>],
    quota: Option<u64>,
    per_item: bool,
) -> StoreResult<Facts> {
    let (newest_seq, bytes_used) = tx.query_row(
        "SELECT newest_seq, bytes_used FROM users WHERE id = ?1",
        [user],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut known =
        tx.prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
    let held = push_plan::held_among(keys, |k| known.exists(params![user, &k[..]]))?;
    let (stored_blobs, listed_blobs) =
        blob_refs::stored_and_listed(tx, user, push_plan::blob_names(records))?;
    Ok(Facts {
        newest_seq,
        bytes_used,
        quota,
        per_item,
        held,
        forgotten: forget::forgotten_among(tx, user, push_plan::streams(records))?,
        stored_blobs,
        listed_blobs,
    })
}

pub(super) async fn pull(
    s: &SqliteStore,
    user: UserId,
    after: u64,
    stream: Option<KeyedId>,
    limit: u32,
    max_bytes: u64,
    cost: PageCost,
) -> StoreResult<Page> {
    s.read(move |c| {
        // Inline ciphertext is read only for rows stored before bodies
        // left the database; others cost a few dozen bytes each.
        const COLUMNS: &str =
            "seq, stream, kind, entry_ids, device_id, body_pack, body_offset, body_len,
             CASE WHEN body_pack IS NULL THEN ciphertext END, entry_id_bytes";
        let take = limit as i64 + 1;
        match stream {
            None => {
                let mut st = c.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM records WHERE user_id = ?1 AND seq > ?2
                     ORDER BY seq LIMIT ?3"
                ))?;
                read_page(
                    st.query(params![user, after as i64, take])?,
                    limit,
                    max_bytes,
                    &cost,
                )
            }
            // records_by_stream: the stream's rows only, already in seq order.
            Some(stream) => {
                let mut st = c.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM records WHERE user_id = ?1 AND stream = ?2
                     AND seq > ?3 ORDER BY seq LIMIT ?4"
                ))?;
                let rows = st.query(params![user, stream.as_str(), after as i64, take])?;
                read_page(rows, limit, max_bytes, &cost)
            }
        }
    })
    .await
}

pub(super) async fn referenced_packs(s: &SqliteStore) -> StoreResult<HashSet<(UserId, PackName)>> {
    s.read(move |c| {
        let mut st = c.prepare_cached(
            "SELECT DISTINCT user_id, body_pack FROM records WHERE body_pack IS NOT NULL
             UNION SELECT user_id, pack FROM forget_compactions",
        )?;
        let rows = st.query_map([], |r| Ok((r.get::<_, UserId>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = HashSet::new();
        for row in rows {
            let (user, pack) = row?;
            let pack = pack
                .parse()
                .map_err(|e| StoreError::Backend(format!("corrupt record: {e}")))?;
            out.insert((user, pack));
        }
        Ok(out)
    })
    .await
}

pub(super) async fn pack_referenced(
    s: &SqliteStore,
    user: UserId,
    pack: &PackName,
) -> StoreResult<bool> {
    let pack = pack.clone();
    s.read(move |c| {
        Ok(
            c.prepare_cached(
                "SELECT 1 FROM records WHERE user_id = ?1 AND body_pack = ?2 LIMIT 1",
            )?
            .exists(params![user, pack.as_str()])?,
        )
    })
    .await
}

pub(super) async fn usage(s: &SqliteStore, user: UserId) -> StoreResult<Usage> {
    s.read(move |c| {
        Ok(c.query_row(
            "SELECT newest_seq, record_count, entry_count, blob_count, bytes_used
             FROM users WHERE id = ?1",
            [user],
            |r| {
                Ok(Usage {
                    newest_seq: r.get::<_, i64>(0)? as u64,
                    records: r.get::<_, i64>(1)? as u64,
                    entries: r.get::<_, i64>(2)? as u64,
                    blobs: r.get::<_, i64>(3)? as u64,
                    bytes_used: r.get::<_, i64>(4)? as u64,
                })
            },
        )?)
    })
    .await
}

pub(super) async fn pending_for_device(
    s: &SqliteStore,
    user: UserId,
    device: &str,
    after: u64,
) -> StoreResult<u64> {
    let device = device.to_owned();
    s.read(move |c| {
        let n: i64 = c.query_row(
            "SELECT COUNT(*) FROM records WHERE user_id = ?1 AND seq > ?2
             AND (device_id IS NULL OR device_id <> ?3)",
            params![user, after as i64, device],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    })
    .await
}

pub(super) async fn mark_damaged(
    s: &SqliteStore,
    user: UserId,
    seqs: Vec<u64>,
) -> StoreResult<u64> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut marked = 0u64;
        let mut unheld = 0i64;
        for seq in seqs {
            let Ok(seq) = i64::try_from(seq) else {
                continue;
            };
            let exists = tx.query_row(
                "SELECT 1 FROM records WHERE user_id = ?1 AND seq = ?2",
                params![user, seq],
                |_| Ok(()),
            );
            if exists.optional()?.is_none() {
                continue;
            }
            tx.execute(
                "INSERT OR IGNORE INTO damaged_records (user_id, seq) VALUES (?1, ?2)",
                params![user, seq],
            )?;
            unheld += tx.execute(
                "DELETE FROM entries WHERE user_id = ?1 AND seq = ?2",
                params![user, seq],
            )? as i64;
            marked += 1;
        }
        tx.execute(
            "UPDATE users SET entry_count = entry_count - ?1 WHERE id = ?2",
            params![unheld, user],
        )?;
        tx.commit()?;
        Ok(marked)
    })
    .await
}

pub(super) async fn known_entries(
    s: &SqliteStore,
    user: UserId,
    ids: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    s.read(move |c| {
        let mut st =
            c.prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
        let mut known = Vec::new();
        for id in ids {
            if st.exists(params![user, entry_key(&id)])? {
                known.push(id);
            }
        }
        Ok(known)
    })
    .await
}

/// Deletes the rows marked damaged whose every entry another record holds
/// now (they were sent again), with their blob references (the names go
/// into `released`): their record count and bytes, to take off. Their
/// bodies stay in their packs until the start-up sweep finds the packs
/// unreferenced.
fn drop_superseded(
    tx: &rusqlite::Transaction<'_>,
    user: UserId,
    released: &mut std::collections::BTreeSet<String>,
) -> StoreResult<(i64, i64)> {
    let marked: Vec<(i64, String, Option<Vec<u8>>, i64)> = tx
        .prepare_cached(
            "SELECT r.seq, r.entry_ids, r.entry_id_bytes, COALESCE(r.body_len, length(r.ciphertext))
             FROM damaged_records d JOIN records r ON r.user_id = d.user_id AND r.seq = d.seq
             WHERE d.user_id = ?1",
        )?
        .query_map([user], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    let mut held =
        tx.prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
    let (mut gone, mut freed) = (0i64, 0i64);
    for (seq, text, bytes, len) in marked {
        let ids = split_ids(bytes, &text)?;
        let mut all = true;
        for id in &ids {
            if !held.exists(params![user, entry_key(id)])? {
                all = false;
                break;
            }
        }
        if !all {
            continue;
        }
        blob_refs::release(tx, user, seq, released)?;
        tx.execute(
            "DELETE FROM records WHERE user_id = ?1 AND seq = ?2",
            params![user, seq],
        )?;
        tx.execute(
            "DELETE FROM damaged_records WHERE user_id = ?1 AND seq = ?2",
            params![user, seq],
        )?;
        gone += 1;
        freed += record_cost(len as u64, ids.len()) as i64;
    }
    Ok((gone, freed))
}

/// A page from rows of [`SqliteStore::pull`]'s columns: at most `limit`
/// records and `max_bytes` as `cost` counts them (at least one record).
fn read_page(
    mut rows: rusqlite::Rows<'_>,
    limit: u32,
    max_bytes: u64,
    cost: &PageCost,
) -> StoreResult<Page> {
    let mut records = Vec::new();
    let mut bytes = 0u64;
    let mut more = false;
    while let Some(r) = rows.next()? {
        if records.len() as u32 >= limit {
            more = true;
            break;
        }
        let pack: Option<String> = r.get(5)?;
        let body = match pack {
            Some(p) => StoredBody::Stored(BodyRef {
                pack: p
                    .parse()
                    .map_err(|e| StoreError::Backend(format!("corrupt record: {e}")))?,
                offset: r.get::<_, i64>(6)? as u64,
                len: r.get::<_, i64>(7)? as u64,
            }),
            None => StoredBody::Inline(r.get(8)?),
        };
        let seq: i64 = r.get(0)?;
        let rec = StoredRecord {
            seq: seq as u64,
            stream: parse_keyed(r.get(1)?)?,
            kind: r.get(2)?,
            entry_ids: split_ids(r.get(9)?, &r.get::<_, String>(3)?)?,
            body,
            device_id: r.get(4)?,
        };
        let n = cost(&rec);
        if !records.is_empty() && bytes + n > max_bytes {
            more = true;
            break;
        }
        bytes += n;
        records.push(rec);
    }
    Ok(Page { records, more })
}
