//! Blob metadata (the bytes are in the blob folder).

use super::*;

pub(super) async fn missing_blobs(
    s: &PgStore,
    user: UserId,
    names: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    let c = s.client().await?;
    let asked: Vec<&str> = names.iter().map(KeyedId::as_str).collect();
    let have: HashSet<String> = c
        .query(
            "SELECT name FROM blobs WHERE user_id = $1 AND name = ANY($2)",
            &[&user, &asked],
        )
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    Ok(names
        .into_iter()
        .filter(|n| !have.contains(n.as_str()))
        .collect())
}

pub(super) async fn blob_size(
    s: &PgStore,
    user: UserId,
    name: &KeyedId,
) -> StoreResult<Option<u64>> {
    let c = s.client().await?;
    Ok(c.query_opt(
        "SELECT size FROM blobs WHERE user_id = $1 AND name = $2",
        &[&user, &name.as_str()],
    )
    .await?
    .map(|r| r.get::<_, i64>(0) as u64))
}

pub(super) async fn add_blob(
    s: &PgStore,
    user: UserId,
    name: &KeyedId,
    size: u64,
    quota: Option<u64>,
    since_ms: i64,
    part_of: Option<&KeyedId>,
) -> StoreResult<bool> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    // The row lock makes the quota check and the counters one step with
    // the insert, as SQLite's single writer does.
    let used: i64 = tx
        .query_opt(
            "SELECT bytes_used FROM users WHERE id = $1 FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?
        .get(0);
    if !super::blob_refs::upload_allowed(&tx, user, name.as_str(), since_ms).await? {
        return Err(crate::store::blob_refs::collecting());
    }
    let exists = tx
        .query_opt(
            "SELECT 1 FROM blobs WHERE user_id = $1 AND name = $2",
            &[&user, &name.as_str()],
        )
        .await?;
    if exists.is_some() {
        return Ok(false);
    }
    let cost = blob_cost(size);
    if quota.is_some_and(|q| used as u64 + cost > q) {
        return Err(StoreError::QuotaExceeded);
    }
    tx.execute(
        "INSERT INTO blobs (user_id, name, size, created_at, part_of)
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &user,
            &name.as_str(),
            &(size as i64),
            &chrono::Utc::now().timestamp(),
            &part_of.map(KeyedId::as_str),
        ],
    )
    .await?;
    tx.execute(
        "UPDATE users SET blob_count = blob_count + 1, bytes_used = bytes_used + $1
         WHERE id = $2",
        &[&(cost as i64), &user],
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn purge_blobs(
    s: &PgStore,
    user: UserId,
    names: Vec<KeyedId>,
) -> StoreResult<Vec<KeyedId>> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    let mut gone = Vec::new();
    let mut freed = 0i64;
    for n in names {
        let size = tx
            .query_opt(
                "DELETE FROM blobs WHERE user_id = $1 AND name = $2 RETURNING size",
                &[&user, &n.as_str()],
            )
            .await?;
        if let Some(r) = size {
            freed += blob_cost(r.get::<_, i64>(0) as u64) as i64;
            gone.push(n);
        }
    }
    if !gone.is_empty() {
        super::blob_refs::uncount_blobs(&tx, user, gone.len(), freed).await?;
        tx.commit().await?;
    }
    Ok(gone)
}
