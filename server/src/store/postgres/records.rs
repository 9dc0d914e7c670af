//! Records: push (seqs, quota, damaged rows), pull and the reads around them.

use super::*;

/// The pull columns (inline ciphertext only for rows without a pack).
const COLUMNS: &str = "seq, stream, kind, device_id, body_pack, body_offset, body_len,
     CASE WHEN body_pack IS NULL THEN ciphertext END, entry_id_bytes";

pub(super) async fn push(
    s: &PgStore,
    user: UserId,
    records: Vec<NewRecord>,
    quota: Option<u64>,
    per_item: bool,
) -> StoreResult<PushOutcome> {
    let now = chrono::Utc::now().timestamp();
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    // No changefeed gap across writers. A puller's cursor passes a seq as
    // soon as it reads a record with a higher one, so a seq may never
    // become visible after a higher seq of the same user. The user's row
    // lock, taken here and held until commit or rollback, orders every
    // push of the user (whichever replica it came through): this one reads
    // `newest_seq` only once the previous holder has ended, and Postgres
    // makes a transaction visible to new snapshots before it frees its
    // locks, so the previous push's records are visible before this one
    // allocates the next seq. Seqs are therefore handed out in commit
    // order: a reader's snapshot holds either none of a push's records or
    // all of them together with every lower seq. (FOR UPDATE under READ
    // COMMITTED re-reads the row once the lock is granted, so `newest_seq`
    // is the committed one, not the one the statement's snapshot saw.)
    let row = tx
        .query_opt(
            "SELECT newest_seq, bytes_used FROM users WHERE id = $1 FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?;
    let (mut seq, used): (i64, i64) = (row.get(0), row.get(1));

    // Which of the push's entry ids are held already: one query for the
    // whole push, then kept up to date as records are taken.
    let all_keys: Vec<Vec<Vec<u8>>> = records
        .iter()
        .map(|r| r.entry_ids.iter().map(entry_key).collect())
        .collect();
    let flat: Vec<&[u8]> = all_keys.iter().flatten().map(Vec::as_slice).collect();
    let mut held: HashSet<Vec<u8>> = tx
        .query(
            "SELECT entry_id FROM entries WHERE user_id = $1 AND entry_id = ANY($2)",
            &[&user, &flat],
        )
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect();

    let (mut stored, mut dropped, mut added) = (0u64, 0u64, 0i64);
    let mut purged = crate::store::forget::Purged::default();
    let mut over_quota = Vec::new();
    let mut refused_streams = HashSet::new();
    let streams: Vec<&str> = (records.iter())
        .flat_map(|r| std::iter::once(&r.stream).chain(&r.group))
        .map(KeyedId::as_str)
        .collect();
    let mut forgotten_now = super::forget::forgotten_among(&tx, user, &streams).await?;
    // Blobs the records refer to that are stored (see `blob_refs`); a
    // record referring to another is refused, and its stream's later ones.
    let (stored_blobs, listed_blobs) =
        super::blob_refs::stored_and_listed(&tx, user, &records).await?;
    let (mut blob_missing, mut blob_refused) = (Vec::new(), HashSet::new());
    let (mut ref_seq, mut ref_name): (Vec<i64>, Vec<&str>) = (vec![], vec![]);
    let mut line_forgets: Vec<(&NewRecord, i64)> = Vec::new();
    let (mut forgotten, mut changes) = (Vec::new(), Vec::new());
    // Columns of the rows to insert, sent as arrays in one statement each.
    let (mut r_seq, mut r_stream, mut r_kind, mut r_ids) = (vec![], vec![], vec![], vec![]);
    let (mut r_dev, mut r_pack, mut r_off, mut r_len) = (vec![], vec![], vec![], vec![]);
    let mut r_group: Vec<Option<&str>> = vec![];
    let (mut e_id, mut e_seq): (Vec<Vec<u8>>, Vec<i64>) = (vec![], vec![]);
    for (i, (r, keys)) in records.iter().zip(&all_keys).enumerate() {
        if refused_streams.contains(r.stream.as_str()) {
            over_quota.push(i as u32);
            continue;
        }
        if blob_refused.contains(r.stream.as_str()) {
            blob_missing.push(i as u32);
            continue;
        }
        let gone = forgotten_now.contains(r.stream.as_str())
            || (r.group.as_ref()).is_some_and(|g| forgotten_now.contains(g.as_str()));
        if !crate::store::forget::takes(&r.kind, gone) {
            forgotten.push(i as u32);
            continue;
        }
        if keys.iter().all(|k| held.contains(k)) {
            dropped += 1;
            continue;
        }
        let absent = |n: &&KeyedId| !stored_blobs.contains(n.as_str());
        if r.refs
            .refs
            .iter()
            .filter(absent)
            .any(|n| listed_blobs.contains(n.as_str()))
        {
            blob_missing.push(i as u32);
            blob_refused.insert(r.stream.as_str());
            continue;
        }
        let cost = record_cost(r.body.len, r.entry_ids.len()) as i64;
        if per_item && quota.is_some_and(|q| (used + added + cost) as u64 > q) {
            over_quota.push(i as u32);
            refused_streams.insert(r.stream.as_str());
            continue;
        }
        seq += 1;
        r_seq.push(seq);
        r_stream.push(r.stream.as_str());
        r_kind.push(r.kind.as_str());
        r_ids.push(keys.concat());
        r_dev.push(r.device_id.as_str());
        r_pack.push(r.body.pack.as_str());
        r_off.push(r.body.offset as i64);
        r_len.push(r.body.len as i64);
        r_group.push(r.group.as_ref().map(KeyedId::as_str));
        for k in keys {
            // The first record to hold an id keeps it, as SQLite's
            // INSERT OR IGNORE does.
            if held.insert(k.clone()) {
                e_id.push(k.clone());
                e_seq.push(seq);
            }
        }
        for n in r
            .refs
            .refs
            .iter()
            .filter(|n| stored_blobs.contains(n.as_str()))
        {
            ref_seq.push(seq);
            ref_name.push(n.as_str());
        }
        stored += 1;
        added += cost;
        match r.kind.as_str() {
            evi_shared::blob_refs::FORGET_LINES_KIND => line_forgets.push((r, seq)),
            evi_shared::forget::FORGET_KIND => {
                forgotten_now.insert(r.stream.as_str().to_owned());
                changes.push((true, r.stream.as_str(), seq));
            }
            evi_shared::forget::UNFORGET_KIND => {
                forgotten_now.remove(r.stream.as_str());
                changes.push((false, r.stream.as_str(), seq));
            }
            _ => {}
        }
    }
    if let Some(q) = quota
        && added > 0
        && (used + added) as u64 > q
    {
        // Dropping the transaction rolls everything back.
        return Err(StoreError::QuotaExceeded);
    }
    let mut collect_blobs = false;
    if stored > 0 {
        tx.execute(
            "INSERT INTO records (user_id, seq, stream, kind, entry_id_bytes, device_id,
                                  body_pack, body_offset, body_len, group_stream, created_at)
             SELECT $1::BIGINT, *, $11::BIGINT FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BYTEA[],
                                          $6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::BIGINT[], $10::TEXT[])",
            &[
                &user, &r_seq, &r_stream, &r_kind, &r_ids, &r_dev, &r_pack, &r_off, &r_len,
                &r_group, &now,
            ],
        )
        .await?;
        let new_entries = tx
            .execute(
                "INSERT INTO entries (user_id, entry_id, seq)
                 SELECT $1::BIGINT, * FROM UNNEST($2::BYTEA[], $3::BIGINT[])
                 ON CONFLICT DO NOTHING",
                &[&user, &e_id, &e_seq],
            )
            .await? as i64;
        super::blob_refs::insert(&tx, user, &ref_seq, &ref_name).await?;
        let mut released = std::collections::BTreeSet::new();
        let (gone, freed) = drop_superseded(&tx, user, &mut released).await?;
        for (r, at) in line_forgets {
            let (stream, forgets) = (r.stream.as_str(), &r.refs.forgets);
            // Only the blobs it names are collected: the lines kept from
            // the same records come again.
            purged += super::blob_refs::forget_lines(&tx, user, stream, at, forgets).await?;
            released.extend(r.refs.forget_blobs.iter().map(|n| n.to_string()));
        }
        // Forgets and undos in batch order, each after the records before it.
        for (forget, stream, at) in changes {
            if forget {
                purged += super::forget::purge(&tx, user, stream, at, &mut released).await?;
            } else {
                super::forget::lift(&tx, user, stream).await?;
            }
        }
        collect_blobs = super::blob_refs::list_unreferenced(&tx, user, &released).await?;
        tx.execute(
            "UPDATE users SET newest_seq = $1, record_count = record_count + $2,
             entry_count = entry_count + $3, bytes_used = bytes_used + $4 WHERE id = $5",
            &[
                &seq,
                &(stored as i64 - gone - purged.records),
                &(new_entries - purged.entries),
                &(added - freed - purged.bytes),
                &user,
            ],
        )
        .await?;
        // The new newest_seq wakes waits on every replica (migration 7).
        tx.commit().await?;
    }
    Ok(PushOutcome {
        stored,
        dropped,
        newest_seq: seq as u64,
        over_quota,
        forgotten,
        compact: purged.packs,
        blob_missing,
        collect_blobs,
    })
}

/// Deletes the rows marked damaged whose every entry another record holds
/// now (they were sent again), with their blob references (the names go
/// into `released`): their record count and bytes, to take off. Their
/// bodies stay until the orphan sweep finds their packs unreferenced.
async fn drop_superseded(
    tx: &deadpool_postgres::Transaction<'_>,
    user: UserId,
    released: &mut std::collections::BTreeSet<String>,
) -> StoreResult<(i64, i64)> {
    let marked = tx
        .query(
            "SELECT r.seq, r.entry_id_bytes, COALESCE(r.body_len, length(r.ciphertext))::BIGINT
             FROM damaged_records d JOIN records r ON r.user_id = d.user_id AND r.seq = d.seq
             WHERE d.user_id = $1",
            &[&user],
        )
        .await?;
    let (mut gone, mut freed) = (0i64, 0i64);
    for row in marked {
        let (seq, bytes, len): (i64, Vec<u8>, i64) = (row.get(0), row.get(1), row.get(2));
        let ids = split_ids(&bytes)?;
        let keys: HashSet<&[u8]> = bytes.chunks_exact(32).collect();
        let keys: Vec<&[u8]> = keys.into_iter().collect();
        let held: i64 = tx
            .query_one(
                "SELECT COUNT(*) FROM entries WHERE user_id = $1 AND entry_id = ANY($2)",
                &[&user, &keys],
            )
            .await?
            .get(0);
        if held as usize != keys.len() {
            continue;
        }
        super::blob_refs::release(tx, user, &[seq], released).await?;
        tx.execute(
            "DELETE FROM records WHERE user_id = $1 AND seq = $2",
            &[&user, &seq],
        )
        .await?;
        tx.execute(
            "DELETE FROM damaged_records WHERE user_id = $1 AND seq = $2",
            &[&user, &seq],
        )
        .await?;
        gone += 1;
        freed += record_cost(len as u64, ids.len()) as i64;
    }
    Ok((gone, freed))
}

pub(super) async fn pull(
    s: &PgStore,
    user: UserId,
    after: u64,
    stream: Option<KeyedId>,
    limit: u32,
    max_bytes: u64,
    cost: PageCost,
) -> StoreResult<Page> {
    let c = s.client().await?;
    let take = i64::from(limit) + 1;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = match &stream {
        None => {
            c.query(
                &format!(
                    "SELECT {COLUMNS} FROM records WHERE user_id = $1 AND seq > $2
                     ORDER BY seq LIMIT $3"
                ),
                &[&user, &after, &take],
            )
            .await?
        }
        // records_by_stream: the stream's rows only, already in seq order.
        Some(stream) => {
            c.query(
                &format!(
                    "SELECT {COLUMNS} FROM records WHERE user_id = $1 AND stream = $2
                     AND seq > $3 ORDER BY seq LIMIT $4"
                ),
                &[&user, &stream.as_str(), &after, &take],
            )
            .await?
        }
    };
    let mut records = Vec::new();
    let mut bytes = 0u64;
    let mut more = false;
    for r in rows {
        if records.len() as u32 >= limit {
            more = true;
            break;
        }
        let pack: Option<String> = r.get(4);
        let body = match pack {
            Some(p) => StoredBody::Stored(BodyRef {
                pack: parse_pack(&p)?,
                offset: r.get::<_, i64>(5) as u64,
                len: r.get::<_, i64>(6) as u64,
            }),
            None => StoredBody::Inline(r.get::<_, Option<Vec<u8>>>(7).unwrap_or_default()),
        };
        let rec = StoredRecord {
            seq: r.get::<_, i64>(0) as u64,
            stream: parse_keyed(r.get(1))?,
            kind: r.get(2),
            entry_ids: split_ids(r.get(8))?,
            body,
            device_id: r.get(3),
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

pub(super) async fn referenced_packs(s: &PgStore) -> StoreResult<HashSet<(UserId, PackName)>> {
    let c = s.client().await?;
    let rows = c
        .query(
            "SELECT DISTINCT user_id, body_pack FROM records WHERE body_pack IS NOT NULL
             UNION SELECT user_id, pack FROM forget_compactions",
            &[],
        )
        .await?;
    rows.into_iter()
        .map(|r| Ok((r.get::<_, UserId>(0), parse_pack(r.get(1))?)))
        .collect()
}

pub(super) async fn pack_referenced(
    s: &PgStore,
    user: UserId,
    pack: &PackName,
) -> StoreResult<bool> {
    let c = s.client().await?;
    Ok(c.query_opt(
        "SELECT 1 FROM records WHERE user_id = $1 AND body_pack = $2 LIMIT 1",
        &[&user, &pack.as_str()],
    )
    .await?
    .is_some())
}

pub(super) async fn usage(s: &PgStore, user: UserId) -> StoreResult<Usage> {
    let c = s.client().await?;
    let r = c
        .query_opt(
            "SELECT newest_seq, record_count, entry_count, blob_count, bytes_used
             FROM users WHERE id = $1",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?;
    let n = |i| r.get::<_, i64>(i) as u64;
    Ok(Usage {
        newest_seq: n(0),
        records: n(1),
        entries: n(2),
        blobs: n(3),
        bytes_used: n(4),
    })
}

pub(super) async fn pending_for_device(
    s: &PgStore,
    user: UserId,
    device: &str,
    after: u64,
) -> StoreResult<u64> {
    let c = s.client().await?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let n: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM records WHERE user_id = $1 AND seq > $2
             AND (device_id IS NULL OR device_id <> $3)",
            &[&user, &after, &device],
        )
        .await?
        .get(0);
    Ok(n as u64)
}

pub(super) async fn mark_damaged(s: &PgStore, user: UserId, seqs: Vec<u64>) -> StoreResult<u64> {
    // A seq no record can have is skipped (the route gives each once).
    let seqs: Vec<i64> = seqs
        .into_iter()
        .filter_map(|s| i64::try_from(s).ok())
        .collect();
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    // Against a push's drop_superseded and its entry counts.
    lock_user(&tx, user).await?;
    // Set-wise, a few round trips whatever the number of seqs: one per seq
    // held the account's row lock and a pooled connection for seconds
    // (issue 46's load test), while the other accounts waited for both.
    let held: Vec<i64> = tx
        .query(
            "SELECT seq FROM records WHERE user_id = $1 AND seq = ANY($2)",
            &[&user, &seqs],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if held.is_empty() {
        return Ok(0);
    }
    tx.execute(
        "INSERT INTO damaged_records (user_id, seq) SELECT $1, unnest($2::bigint[])
         ON CONFLICT DO NOTHING",
        &[&user, &held],
    )
    .await?;
    let unheld = tx
        .execute(
            "DELETE FROM entries WHERE user_id = $1 AND seq = ANY($2)",
            &[&user, &held],
        )
        .await? as i64;
    tx.execute(
        "UPDATE users SET entry_count = entry_count - $1 WHERE id = $2",
        &[&unheld, &user],
    )
    .await?;
    tx.commit().await?;
    Ok(held.len() as u64)
}

pub(super) async fn known_entries(
    s: &PgStore,
    user: UserId,
    ids: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    let c = s.client().await?;
    let keys: Vec<Vec<u8>> = ids.iter().map(entry_key).collect();
    let held: HashSet<Vec<u8>> = c
        .query(
            "SELECT entry_id FROM entries WHERE user_id = $1 AND entry_id = ANY($2)",
            &[&user, &keys],
        )
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    Ok(ids
        .into_iter()
        .zip(keys)
        .filter(|(_, k)| held.contains(k))
        .map(|(id, _)| id)
        .collect())
}
