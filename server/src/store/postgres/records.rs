//! Records: push (seqs, quota, damaged rows), pull and the reads around them.

use super::*;
use crate::store::push_plan::{self, Facts, Planner, Step};

/// The pull columns (inline ciphertext only for rows without a pack).
const COLUMNS: &str = "seq, stream, kind, device_id, body_pack, body_offset, body_len,
     CASE WHEN body_pack IS NULL THEN ciphertext END, entry_id_bytes";

/// Executes the plan of [`push_plan`], whose rules these are: the rows of
/// the records it stores go in as arrays, one statement per table, sent
/// before each step that reads them (a purge, the superseded rows) and at
/// the end.
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
    let keys = push_plan::entry_keys(&records);
    let facts = Facts {
        newest_seq: row.get(0),
        bytes_used: row.get(1),
        quota,
        per_item,
        ..push_facts(&tx, user, &records, &keys).await?
    };
    let mut plan = Planner::new(&records, keys, facts);
    let (mut rows, mut new_entries) = (Rows::default(), 0);
    while let Some(step) = plan.next_step()? {
        if !matches!(step, Step::Store(_) | Step::Unforget { .. }) {
            new_entries += rows.insert(&tx, user, now).await?;
        }
        match step {
            Step::Store(t) => rows.add(t),
            Step::Forget { stream, seq } => {
                let purged = super::forget::purge(&tx, user, stream, seq, plan.released()).await?;
                plan.purged(purged);
            }
            Step::Unforget { stream } => super::forget::lift(&tx, user, stream).await?,
            Step::ForgetLines {
                stream,
                seq,
                forgets,
            } => {
                let lines = super::blob_refs::forget_lines(&tx, user, stream, seq, forgets);
                plan.purged(lines.await?);
            }
            Step::DropSuperseded => {
                let (gone, freed) = drop_superseded(&tx, user, plan.released()).await?;
                plan.superseded(gone, freed);
            }
        }
    }
    if !plan.stored() {
        // Nothing to keep: dropping the transaction rolls it back.
        return Ok(plan.outcome(false));
    }
    new_entries += rows.insert(&tx, user, now).await?;
    let collect_blobs = super::blob_refs::list_unreferenced(&tx, user, plan.released()).await?;
    let n = plan.counters(new_entries);
    tx.execute(
        "UPDATE users SET newest_seq = $1, record_count = record_count + $2,
         entry_count = entry_count + $3, bytes_used = bytes_used + $4 WHERE id = $5",
        &[&n.newest_seq, &n.records, &n.entries, &n.bytes, &user],
    )
    .await?;
    // The new newest_seq wakes waits on every replica (migration 7).
    tx.commit().await?;
    Ok(plan.outcome(collect_blobs))
}

/// What [`push_plan`] decides from besides the user's row, read in the
/// push's transaction: one query each for the ids, streams and blobs.
async fn push_facts(
    tx: &deadpool_postgres::Transaction<'_>,
    user: UserId,
    records: &[NewRecord],
    keys: &[Vec<push_plan::EntryKey>],
) -> StoreResult<Facts> {
    let flat: Vec<&[u8]> = keys.iter().flatten().map(|k| &k[..]).collect();
    let held = tx
        .query(
            "SELECT entry_id FROM entries WHERE user_id = $1 AND entry_id = ANY($2)",
            &[&user, &flat],
        )
        .await?
        .into_iter()
        .filter_map(|r| <push_plan::EntryKey>::try_from(r.get::<_, Vec<u8>>(0)).ok())
        .collect();
    let streams: Vec<&str> = push_plan::streams(records).collect();
    let (stored_blobs, listed_blobs) =
        super::blob_refs::stored_and_listed(tx, user, records).await?;
    Ok(Facts {
        held,
        forgotten: super::forget::forgotten_among(tx, user, &streams).await?,
        stored_blobs,
        listed_blobs,
        ..Facts::default()
    })
}

/// The rows of the records a push stores and not sent yet, as the columns
/// of one statement per table.
#[derive(Default)]
struct Rows<'r> {
    seq: Vec<i64>,
    stream: Vec<&'r str>,
    kind: Vec<&'r str>,
    ids: Vec<Vec<u8>>,
    device: Vec<&'r str>,
    pack: Vec<&'r str>,
    offset: Vec<i64>,
    len: Vec<i64>,
    group: Vec<Option<&'r str>>,
    entry_id: Vec<push_plan::EntryKey>,
    entry_seq: Vec<i64>,
    ref_seq: Vec<i64>,
    ref_name: Vec<&'r str>,
}

impl<'r> Rows<'r> {
    fn add(&mut self, t: push_plan::Take<'r>) {
        let r = t.record;
        self.seq.push(t.seq);
        self.stream.push(r.stream.as_str());
        self.kind.push(r.kind.as_str());
        self.ids.push(t.ids);
        self.device.push(r.device_id.as_str());
        self.pack.push(r.body.pack.as_str());
        self.offset.push(r.body.offset as i64);
        self.len.push(r.body.len as i64);
        self.group.push(r.group.as_ref().map(KeyedId::as_str));
        self.entry_seq.extend(t.new_ids.iter().map(|_| t.seq));
        self.entry_id.extend(t.new_ids);
        self.ref_seq.extend(t.refs.iter().map(|_| t.seq));
        self.ref_name.extend(t.refs.iter().map(|n| n.as_str()));
    }

    /// Inserts the rows and empties the list: how many known ids were new.
    async fn insert(
        &mut self,
        tx: &deadpool_postgres::Transaction<'_>,
        user: UserId,
        now: i64,
    ) -> StoreResult<i64> {
        if self.seq.is_empty() {
            return Ok(0);
        }
        tx.execute(
            "INSERT INTO records (user_id, seq, stream, kind, entry_id_bytes, device_id,
                                  body_pack, body_offset, body_len, group_stream, created_at)
             SELECT $1::BIGINT, *, $11::BIGINT FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BYTEA[],
                                          $6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::BIGINT[], $10::TEXT[])",
            &[
                &user, &self.seq, &self.stream, &self.kind, &self.ids, &self.device, &self.pack,
                &self.offset, &self.len, &self.group, &now,
            ],
        )
        .await?;
        let entry_id: Vec<&[u8]> = self.entry_id.iter().map(|k| &k[..]).collect();
        // The first record to hold an id keeps it, as SQLite's INSERT OR
        // IGNORE does.
        let new_entries = tx
            .execute(
                "INSERT INTO entries (user_id, entry_id, seq)
                 SELECT $1::BIGINT, * FROM UNNEST($2::BYTEA[], $3::BIGINT[])
                 ON CONFLICT DO NOTHING",
                &[&user, &entry_id, &self.entry_seq],
            )
            .await? as i64;
        super::blob_refs::insert(tx, user, &self.ref_seq, &self.ref_name).await?;
        *self = Rows::default();
        Ok(new_entries)
    }
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
