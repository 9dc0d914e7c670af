//! The Postgres side of [`crate::store::forget`]: the same steps as
//! SQLite's, inside the push's transaction (which holds the user's row
//! lock, so no push of the user interleaves).

use std::collections::BTreeSet;

use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};

use super::*;
use crate::store::forget::Purged;
use crate::store::push_plan::EntryKey;

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// The streams among `streams` that are forgotten now.
pub(super) async fn forgotten_among(
    tx: &Tx<'_>,
    user: UserId,
    streams: &[&str],
) -> StoreResult<HashSet<String>> {
    Ok(tx
        .query(
            "SELECT stream FROM forgotten_streams WHERE user_id = $1 AND stream = ANY($2)",
            &[&user, &streams],
        )
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect())
}

/// Deletes the records `seqs` with their entry ids, damaged marks and blob
/// references (the names they held into `released`), and lists `packs`
/// (theirs) for compaction: what a forget of a stream and one of journal
/// lines both do to the records they take. Adds the entry ids deleted and
/// whether a pack was listed to `purged`.
pub(super) async fn delete_records(
    tx: &Tx<'_>,
    user: UserId,
    seqs: &[i64],
    mut packs: Vec<String>,
    released: &mut BTreeSet<String>,
    purged: &mut Purged,
) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    super::blob_refs::release(tx, user, seqs, released).await?;
    let unheld: Vec<EntryKey> = tx
        .query(
            "DELETE FROM entries WHERE user_id = $1 AND seq = ANY($2) RETURNING entry_id",
            &[&user, &seqs],
        )
        .await?
        .into_iter()
        // A key of another length is none of a push's.
        .filter_map(|r| <EntryKey>::try_from(r.get::<_, Vec<u8>>(0)).ok())
        .collect();
    purged.entries += unheld.len() as i64;
    purged.unheld.extend(unheld);
    tx.execute(
        "DELETE FROM damaged_records WHERE user_id = $1 AND seq = ANY($2)",
        &[&user, &seqs],
    )
    .await?;
    tx.execute(
        "DELETE FROM records WHERE user_id = $1 AND seq = ANY($2)",
        &[&user, &seqs],
    )
    .await?;
    packs.sort();
    packs.dedup();
    if packs.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO forget_compactions (user_id, pack) SELECT $1::BIGINT, * FROM UNNEST($2::TEXT[])
         ON CONFLICT DO NOTHING",
        &[&user, &packs],
    )
    .await?;
    purged.packs = true;
    Ok(())
}

/// After the tombstone `seq` of `stream` was inserted: deletes the records
/// of the stream and of its group before it (not their tombstones), as
/// [`delete_records`] does, and marks the stream forgotten.
pub(super) async fn purge(
    tx: &Tx<'_>,
    user: UserId,
    stream: &str,
    seq: i64,
    released: &mut BTreeSet<String>,
) -> StoreResult<Purged> {
    let rows = tx
        .query(
            "SELECT seq, entry_id_bytes, COALESCE(body_len, length(ciphertext))::BIGINT, body_pack
             FROM records WHERE user_id = $1 AND (stream = $2 OR group_stream = $2) AND seq < $3
               AND kind <> $4 AND kind <> $5",
            &[&user, &stream, &seq, &FORGET_KIND, &UNFORGET_KIND],
        )
        .await?;
    let mut purged = Purged::default();
    let mut seqs: Vec<i64> = Vec::with_capacity(rows.len());
    let mut packs: Vec<String> = Vec::new();
    for r in &rows {
        let bytes: Vec<u8> = r.get(1);
        let len: i64 = r.get(2);
        seqs.push(r.get(0));
        purged.records += 1;
        purged.bytes += record_cost(len as u64, bytes.len() / 32) as i64;
        if let Some(p) = r.get::<_, Option<String>>(3) {
            packs.push(p);
        }
    }
    delete_records(tx, user, &seqs, packs, released, &mut purged).await?;
    tx.execute(
        "INSERT INTO forgotten_streams (user_id, stream, seq) VALUES ($1, $2, $3)
         ON CONFLICT (user_id, stream) DO UPDATE SET seq = EXCLUDED.seq",
        &[&user, &stream, &seq],
    )
    .await?;
    Ok(purged)
}

/// After an undo of `stream` was inserted: the stream takes records again.
pub(super) async fn lift(tx: &Tx<'_>, user: UserId, stream: &str) -> StoreResult<()> {
    tx.execute(
        "DELETE FROM forgotten_streams WHERE user_id = $1 AND stream = $2",
        &[&user, &stream],
    )
    .await?;
    Ok(())
}

/// Now, in milliseconds since the epoch, by the database's clock: one
/// clock for every replica, whatever theirs say.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::BIGINT";

pub(super) async fn packs_to_compact(s: &PgStore) -> StoreResult<Vec<ToCompact>> {
    let c = s.client().await?;
    c.query(
        &format!("SELECT user_id, pack, repointed_at, {NOW_MS} FROM forget_compactions"),
        &[],
    )
    .await?
    .into_iter()
    .map(|r| {
        Ok(ToCompact {
            user: r.get(0),
            pack: parse_pack(r.get(1))?,
            repointed_ago: crate::store::repointed_ago(r.get(2), r.get(3)),
        })
    })
    .collect()
}

pub(super) async fn bodies_in_pack(
    s: &PgStore,
    user: UserId,
    pack: &PackName,
) -> StoreResult<Vec<(u64, BodyRef)>> {
    let c = s.client().await?;
    c.query(
        "SELECT seq, body_offset, body_len FROM records
         WHERE user_id = $1 AND body_pack = $2 ORDER BY body_offset",
        &[&user, &pack.as_str()],
    )
    .await?
    .into_iter()
    .map(|r| {
        Ok((
            r.get::<_, i64>(0) as u64,
            BodyRef {
                pack: pack.clone(),
                offset: r.get::<_, i64>(1) as u64,
                len: r.get::<_, i64>(2) as u64,
            },
        ))
    })
    .collect()
}

pub(super) async fn repoint(
    s: &PgStore,
    user: UserId,
    from: &PackName,
    moved: Vec<(u64, BodyRef)>,
) -> StoreResult<()> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let new_pack = moved.first().map(|(_, to)| to.pack.clone());
    let count = moved.len() as u64;
    let mut updated = 0;
    for (seq, to) in moved {
        updated += tx
            .execute(
                "UPDATE records SET body_pack = $1, body_offset = $2, body_len = $3
             WHERE user_id = $4 AND seq = $5 AND body_pack = $6",
                &[
                    &to.pack.as_str(),
                    &(to.offset as i64),
                    &(to.len as i64),
                    &user,
                    &(seq as i64),
                    &from.as_str(),
                ],
            )
            .await?;
    }
    // A forget deleted some of them while they were copied: the copy holds
    // their bodies, so it is rewritten in turn.
    if let Some(p) = new_pack
        && updated < count
    {
        tx.execute(
            "INSERT INTO forget_compactions (user_id, pack) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&user, &p.as_str()],
        )
        .await?;
    }
    tx.execute(
        &format!(
            "UPDATE forget_compactions SET repointed_at = {NOW_MS}
             WHERE user_id = $1 AND pack = $2 AND repointed_at IS NULL"
        ),
        &[&user, &from.as_str()],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn done(s: &PgStore, user: UserId, pack: &PackName) -> StoreResult<()> {
    let c = s.client().await?;
    c.execute(
        "DELETE FROM forget_compactions WHERE user_id = $1 AND pack = $2",
        &[&user, &pack.as_str()],
    )
    .await?;
    Ok(())
}
