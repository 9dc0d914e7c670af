//! The Postgres side of [`crate::store::blob_refs`]: the same steps as
//! SQLite's, inside the push's transaction (which holds the user's row
//! lock), or as the collection's own steps (which take it too, so a push
//! and a collection of one user never interleave).

use std::collections::BTreeSet;

use evi_shared::blob_refs::FORGET_LINES_KIND;
use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};

use super::*;
use crate::store::forget::Purged;

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// Of the blobs the push's records refer to, those stored now (whole, or
/// as pieces tied to them: see [`evi_shared::blob_refs`]), and those
/// deleted as unreferenced (see [`crate::store::blob_refs`]).
pub(super) async fn stored_and_listed(
    tx: &Tx<'_>,
    user: UserId,
    records: &[NewRecord],
) -> StoreResult<(HashSet<String>, HashSet<String>)> {
    let names: Vec<&str> = records
        .iter()
        .flat_map(|r| r.refs.refs.iter().map(KeyedId::as_str))
        .collect();
    if names.is_empty() {
        return Ok((HashSet::new(), HashSet::new()));
    }
    let mut stored = names_in(tx, "blobs", user, &names).await?;
    stored.extend(
        tx.query(
            "SELECT DISTINCT part_of FROM blobs WHERE user_id = $1 AND part_of = ANY($2)",
            &[&user, &names],
        )
        .await?
        .into_iter()
        .map(|r| r.get::<_, String>(0)),
    );
    Ok((
        stored,
        names_in(tx, "blob_collections", user, &names).await?,
    ))
}

/// Which of `names` `table` holds for `user`.
async fn names_in(
    tx: &Tx<'_>,
    table: &'static str,
    user: UserId,
    names: &[&str],
) -> StoreResult<HashSet<String>> {
    let sql = format!("SELECT name FROM {table} WHERE user_id = $1 AND name = ANY($2)");
    Ok(tx
        .query(&sql, &[&user, &names])
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect())
}

/// Records that the records of `seqs` refer to `names` (pairwise).
pub(super) async fn insert(
    tx: &Tx<'_>,
    user: UserId,
    seqs: &[i64],
    names: &[&str],
) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO blob_refs (user_id, seq, name)
         SELECT $1::BIGINT, * FROM UNNEST($2::BIGINT[], $3::TEXT[]) ON CONFLICT DO NOTHING",
        &[&user, &seqs, &names],
    )
    .await?;
    Ok(())
}

/// Deletes the references of the records `seqs`; the names they held.
pub(super) async fn release(
    tx: &Tx<'_>,
    user: UserId,
    seqs: &[i64],
    names: &mut BTreeSet<String>,
) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let rows = tx
        .query(
            "DELETE FROM blob_refs WHERE user_id = $1 AND seq = ANY($2) RETURNING name",
            &[&user, &seqs],
        )
        .await?;
    names.extend(rows.into_iter().map(|r| r.get::<_, String>(0)));
    Ok(())
}

/// After the `forget-lines` record `seq` of `stream` was inserted: deletes
/// the stream's records before it holding any of `forgets`, with their
/// entry ids, damaged marks and references; lists their packs.
pub(super) async fn forget_lines(
    tx: &Tx<'_>,
    user: UserId,
    stream: &str,
    seq: i64,
    forgets: &[KeyedId],
) -> StoreResult<Purged> {
    let forgets: HashSet<Vec<u8>> = forgets.iter().map(entry_key).collect();
    let rows = tx
        .query(
            "SELECT seq, entry_id_bytes, COALESCE(body_len, length(ciphertext))::BIGINT, body_pack
             FROM records WHERE user_id = $1 AND stream = $2 AND seq < $3
               AND kind <> $4 AND kind <> $5 AND kind <> $6",
            &[
                &user,
                &stream,
                &seq,
                &FORGET_KIND,
                &UNFORGET_KIND,
                &FORGET_LINES_KIND,
            ],
        )
        .await?;
    let mut purged = Purged::default();
    let (mut seqs, mut packs): (Vec<i64>, Vec<String>) = (Vec::new(), Vec::new());
    for r in &rows {
        let bytes: Vec<u8> = r.get(1);
        if !bytes.chunks_exact(32).any(|c| forgets.contains(c)) {
            continue;
        }
        seqs.push(r.get(0));
        purged.records += 1;
        purged.bytes += record_cost(r.get::<_, i64>(2) as u64, bytes.len() / 32) as i64;
        if let Some(p) = r.get::<_, Option<String>>(3) {
            packs.push(p);
        }
    }
    // The names those records held are not listed: the lines kept from
    // them come again, with their references (see `crate::store::blob_refs`).
    let released = &mut BTreeSet::new();
    super::forget::delete_records(tx, user, &seqs, packs, released, &mut purged).await?;
    Ok(purged)
}

/// Lists for collection each of `names` that is stored (whole or in
/// pieces) and that no record refers to; whether any was listed.
pub(super) async fn list_unreferenced(
    tx: &Tx<'_>,
    user: UserId,
    names: &BTreeSet<String>,
) -> StoreResult<bool> {
    if names.is_empty() {
        return Ok(false);
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let n = tx
        .execute(
            "INSERT INTO blob_collections (user_id, name, done_at)
             SELECT DISTINCT $1::BIGINT, n.name, NULL::BIGINT FROM UNNEST($2::TEXT[]) AS n(name)
             WHERE EXISTS (SELECT 1 FROM blobs b WHERE b.user_id = $1
                             AND (b.name = n.name OR b.part_of = n.name))
               AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.user_id = $1 AND r.name = n.name)
             ON CONFLICT (user_id, name) DO UPDATE SET done_at = NULL",
            &[&user, &names],
        )
        .await?;
    Ok(n > 0)
}

/// Whether an upload that began at `since_ms` may record blob `name` now.
pub(super) async fn upload_allowed(
    tx: &Tx<'_>,
    user: UserId,
    name: &str,
    since_ms: i64,
) -> StoreResult<bool> {
    let row = tx
        .query_opt(
            "SELECT done_at FROM blob_collections WHERE user_id = $1 AND name = $2",
            &[&user, &name],
        )
        .await?;
    Ok(row.is_none_or(|r| crate::store::blob_refs::upload_allowed(r.get(0), since_ms)))
}

pub(super) async fn to_collect(s: &PgStore) -> StoreResult<Vec<(UserId, KeyedId)>> {
    let c = s.client().await?;
    let now = chrono::Utc::now().timestamp_millis();
    c.execute(
        "DELETE FROM blob_collections WHERE done_at IS NOT NULL AND done_at < $1",
        &[&(now - crate::store::blob_refs::KEEP_DONE_MS)],
    )
    .await?;
    c.query(
        "SELECT user_id, name FROM blob_collections WHERE done_at IS NULL",
        &[],
    )
    .await?
    .into_iter()
    .map(|r| {
        let name: String = r.get(1);
        let name = name
            .parse()
            .map_err(|e| StoreError::Backend(format!("corrupt blob name: {e}")))?;
        Ok((r.get::<_, UserId>(0), name))
    })
    .collect()
}

/// As SQLite's: deletes the rows of `name` and of the pieces tied to it
/// unless a record refers to it, and lists the pieces in the same step.
pub(super) async fn take_row(
    s: &PgStore,
    user: UserId,
    name: &KeyedId,
) -> StoreResult<Option<Vec<KeyedId>>> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    let referred = tx
        .query_opt(
            "SELECT 1 FROM blob_refs WHERE user_id = $1 AND name = $2 LIMIT 1",
            &[&user, &name.as_str()],
        )
        .await?
        .is_some();
    if referred {
        tx.execute(
            "DELETE FROM blob_collections WHERE user_id = $1 AND name = $2",
            &[&user, &name.as_str()],
        )
        .await?;
        tx.commit().await?;
        return Ok(None);
    }
    let rows = tx
        .query(
            "DELETE FROM blobs WHERE user_id = $1 AND (name = $2 OR part_of = $2)
             RETURNING name, size",
            &[&user, &name.as_str()],
        )
        .await?;
    let freed: i64 = (rows.iter())
        .map(|r| blob_cost(r.get::<_, i64>(1) as u64) as i64)
        .sum();
    uncount_blobs(&tx, user, rows.len(), freed).await?;
    let pieces: Vec<String> = (rows.iter())
        .map(|r| r.get::<_, String>(0))
        .filter(|n| n != name.as_str())
        .collect();
    if !pieces.is_empty() {
        tx.execute(
            "INSERT INTO blob_collections (user_id, name, done_at)
             SELECT $1::BIGINT, *, NULL::BIGINT FROM UNNEST($2::TEXT[])
             ON CONFLICT (user_id, name) DO UPDATE SET done_at = NULL",
            &[&user, &pieces],
        )
        .await?;
    }
    tx.commit().await?;
    pieces
        .into_iter()
        .map(|n| {
            n.parse()
                .map_err(|e| StoreError::Backend(format!("corrupt blob name: {e}")))
        })
        .collect::<StoreResult<Vec<_>>>()
        .map(Some)
}

pub(super) async fn mark_done(s: &PgStore, user: UserId, name: &KeyedId) -> StoreResult<()> {
    let c = s.client().await?;
    c.execute(
        "UPDATE blob_collections SET done_at = $1 WHERE user_id = $2 AND name = $3",
        &[
            &chrono::Utc::now().timestamp_millis(),
            &user,
            &name.as_str(),
        ],
    )
    .await?;
    Ok(())
}

/// Takes `count` deleted blobs of `freed` cost off the account's counters
/// (nothing when none went), in the transaction that deleted them.
pub(super) async fn uncount_blobs(
    tx: &Tx<'_>,
    user: UserId,
    count: usize,
    freed: i64,
) -> Result<(), tokio_postgres::Error> {
    if count > 0 {
        tx.execute(
            "UPDATE users SET blob_count = blob_count - $1, bytes_used = bytes_used - $2
             WHERE id = $3",
            &[&(count as i64), &freed, &user],
        )
        .await?;
    }
    Ok(())
}
