//! Blob rows: which are stored, their sizes, adding and purging them.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::*;

pub(super) async fn missing_blobs(
    s: &SqliteStore,
    user: UserId,
    names: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    s.read(move |c| {
        let mut st = c.prepare_cached("SELECT 1 FROM blobs WHERE user_id = ?1 AND name = ?2")?;
        let mut missing = Vec::new();
        for n in names {
            if !st.exists(params![user, n.as_str()])? {
                missing.push(n);
            }
        }
        Ok(missing)
    })
    .await
}

pub(super) async fn blob_size(
    s: &SqliteStore,
    user: UserId,
    name: &KeyedId,
) -> StoreResult<Option<u64>> {
    let name = name.clone();
    s.read(move |c| {
        Ok(c.query_row(
            "SELECT size FROM blobs WHERE user_id = ?1 AND name = ?2",
            params![user, name.as_str()],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .map(|s| s as u64))
    })
    .await
}

pub(super) async fn add_blob(
    s: &SqliteStore,
    user: UserId,
    name: &KeyedId,
    size: u64,
    quota: Option<u64>,
    since_ms: i64,
    part_of: Option<&KeyedId>,
) -> StoreResult<bool> {
    let name = name.clone();
    let part_of = part_of.map(|p| p.to_string());
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if !blob_refs::upload_allowed(&tx, user, name.as_str(), since_ms)? {
            return Err(crate::store::blob_refs::collecting());
        }
        let exists = tx
            .prepare_cached("SELECT 1 FROM blobs WHERE user_id = ?1 AND name = ?2")?
            .exists(params![user, name.as_str()])?;
        if exists {
            return Ok(false);
        }
        let used: i64 =
            tx.query_row("SELECT bytes_used FROM users WHERE id = ?1", [user], |r| {
                r.get(0)
            })?;
        let cost = blob_cost(size);
        if quota.is_some_and(|q| used as u64 + cost > q) {
            return Err(StoreError::QuotaExceeded);
        }
        tx.execute(
            "INSERT INTO blobs (user_id, name, size, created_at, part_of)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                user,
                name.as_str(),
                size as i64,
                chrono::Utc::now().timestamp(),
                part_of
            ],
        )?;
        tx.execute(
            "UPDATE users SET blob_count = blob_count + 1, bytes_used = bytes_used + ?1
             WHERE id = ?2",
            params![cost as i64, user],
        )?;
        tx.commit()?;
        Ok(true)
    })
    .await
}

pub(super) async fn purge_blobs(
    s: &SqliteStore,
    user: UserId,
    names: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut gone = Vec::new();
        let mut freed = 0i64;
        {
            let mut del = tx.prepare_cached(
                "DELETE FROM blobs WHERE user_id = ?1 AND name = ?2 RETURNING size",
            )?;
            for n in names {
                let size: Option<i64> = del
                    .query_row(params![user, n.as_str()], |r| r.get(0))
                    .optional()?;
                if let Some(s) = size {
                    freed += blob_cost(s as u64) as i64;
                    gone.push(n);
                }
            }
        }
        if !gone.is_empty() {
            blob_refs::uncount_blobs(&tx, user, gone.len(), freed)?;
            tx.commit()?;
        }
        Ok(gone)
    })
    .await
}
