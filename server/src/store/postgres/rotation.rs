//! Key rotation (see [`crate::store::rotation`]). The commit holds the
//! account's row lock, the one every push takes, so no record commits
//! between its check of `newest_seq` and the swap, on any replica.

use super::*;
use crate::store::rotation::{
    ACCOUNT_TABLES, Began, Begun, CommitRefused, Committed, NO_PASSWORD, NewKey, resumes,
    retired_name, staging_name,
};

pub(super) async fn begin(
    s: &PgStore,
    user: UserId,
    d: NewDevice,
    by: &str,
    key: NewKey,
) -> StoreResult<Begun> {
    let NewKey {
        check: key_check,
        proof_hash,
    } = key;
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let row = tx
        .query_opt(
            "SELECT key_generation, staging_of FROM users
             WHERE id = $1 AND retired_at IS NULL FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?;
    if row.get::<_, Option<i64>>(1).is_some() {
        return Err(StoreError::NotFound);
    }
    let next = row.get::<_, i64>(0) + 1;
    let found = tx
        .query_opt(
            "SELECT id, key_check, staging_by FROM users WHERE staging_of = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    let mut begun = Begun {
        generation: next,
        fresh: true,
        abandoned: false,
        abandoned_by: None,
    };
    let resumed = found.as_ref().and_then(|r| {
        let kcv: Option<Vec<u8>> = r.get(1);
        let owner: Option<String> = r.get(2);
        resumes(kcv.as_deref(), owner.as_deref(), key_check.as_deref(), by)
            .then(|| r.get::<_, i64>(0))
    });
    let staging: i64 = match resumed {
        Some(id) => {
            begun.fresh = false;
            tx.execute(
                "UPDATE users SET staging_by = $1, key_check = COALESCE(key_check, $2),
                                  key_proof_hash = COALESCE(key_proof_hash, $4)
                 WHERE id = $3",
                &[&by, &key_check, &id, &proof_hash],
            )
            .await?;
            id
        }
        None => {
            if let Some(r) = &found {
                begun.abandoned = true;
                let owner: Option<String> = r.get(2);
                begun.abandoned_by = device_name(&tx, user, owner.as_deref()).await?;
                retire_staging(&tx, r.get(0), d.now).await?;
            }
            tx.query_one(
                "INSERT INTO users (name, password_hash, created_at, key_generation, staging_of,
                                    staging_by, key_check, key_proof_hash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                &[
                    &staging_name(user),
                    &NO_PASSWORD,
                    &d.now,
                    &next,
                    &user,
                    &by,
                    &key_check,
                    &proof_hash,
                ],
            )
            .await?
            .get(0)
        }
    };
    tx.execute("DELETE FROM devices WHERE user_id = $1", &[&staging])
        .await?;
    tx.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at, key_generation)
         VALUES ($1, $2, $3, $4, $5, $5, $6)",
        &[&d.id, &staging, &d.name, &&d.token_hash[..], &d.now, &next],
    )
    .await?;
    tx.commit().await?;
    Ok(begun)
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// The name of `user`'s device `id`, when it has one.
async fn device_name(tx: &Tx<'_>, user: UserId, id: Option<&str>) -> StoreResult<Option<String>> {
    let Some(id) = id else { return Ok(None) };
    Ok(tx
        .query_opt(
            "SELECT name FROM devices WHERE id = $1 AND user_id = $2",
            &[&id, &user],
        )
        .await?
        .map(|r| r.get(0)))
}

/// Abandons the staging account `staging`: its device (and token) goes,
/// and it is retired, for [`crate::rotation::purge`] to delete.
pub(super) async fn retire_staging(tx: &Tx<'_>, staging: UserId, now: i64) -> StoreResult<()> {
    tx.execute("DELETE FROM devices WHERE user_id = $1", &[&staging])
        .await?;
    tx.execute(
        "UPDATE users SET name = $1, staging_of = NULL, retired_at = $2 WHERE id = $3",
        &[&retired_name(staging), &now, &staging],
    )
    .await?;
    Ok(())
}

/// See [`crate::store::Store::expire_rotations`]: each in a transaction of
/// its own, taking its account's row lock first, as a revoke's abandon does.
pub(super) async fn expire(s: &PgStore, begun_before: i64, now: i64) -> StoreResult<usize> {
    let mut c = s.client().await?;
    let stale: Vec<(UserId, UserId)> = c
        .query(
            "SELECT id, staging_of FROM users WHERE staging_of IS NOT NULL AND created_at < $1",
            &[&begun_before],
        )
        .await?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut n = 0;
    for (staging, user) in stale {
        let tx = c.transaction().await?;
        if lock_user(&tx, user).await.is_err() {
            continue;
        }
        let still = tx
            .query_opt(
                "SELECT 1 FROM users WHERE id = $1 AND staging_of = $2 AND created_at < $3
                 FOR UPDATE",
                &[&staging, &user, &begun_before],
            )
            .await?;
        if still.is_some() {
            retire_staging(&tx, staging, now).await?;
            n += 1;
        }
        tx.commit().await?;
    }
    Ok(n)
}

/// Abandons the rotation of `user` that `began_by` names, if one is
/// staged: what a revoke and a password change do in their transaction
/// (which holds the user's row lock, as a begin does). Whether one was.
pub(super) async fn abandon(
    tx: &Tx<'_>,
    user: UserId,
    began_by: Began<'_>,
    now: i64,
) -> StoreResult<bool> {
    let found = tx
        .query_opt(
            "SELECT id, staging_by FROM users WHERE staging_of = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    match found {
        Some(r) if began_by.matches(r.get::<_, Option<String>>(1).as_deref()) => {
            retire_staging(tx, r.get(0), now).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

pub(super) async fn commit(
    s: &PgStore,
    user: UserId,
    device_id: &str,
    through: u64,
    revoke: Vec<String>,
    now: i64,
) -> StoreResult<Committed> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let old = tx
        .query_one(
            "SELECT name, password_hash, created_at, newest_seq, key_generation
             FROM users WHERE id = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    let staging = tx
        .query_opt(
            "SELECT id, key_check, staging_by FROM users WHERE staging_of = $1 FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(CommitRefused::NotBegun)?;
    let staging_id: i64 = staging.get(0);
    if staging
        .get::<_, Option<String>>(2)
        .is_some_and(|o| o != device_id)
    {
        return Err(CommitRefused::NotYours.into());
    }
    if staging.get::<_, Option<Vec<u8>>>(1).is_none() {
        return Err(CommitRefused::NoKeyCheck.into());
    }
    let name: String = old.get(0);
    let password: String = old.get(1);
    let created: i64 = old.get(2);
    let newest = old.get::<_, i64>(3) as u64;
    let next = old.get::<_, i64>(4) + 1;
    if newest != through {
        return Err(CommitRefused::Behind { newest, through }.into());
    }
    let by: String = tx
        .query_one(
            "SELECT name FROM devices WHERE id = $1 AND user_id = $2",
            &[&device_id, &user],
        )
        .await?
        .get(0);
    let mut revoked = Vec::new();
    for id in revoke.iter().filter(|id| id.as_str() != device_id) {
        if tx
            .execute(
                "DELETE FROM devices WHERE id = $1 AND user_id = $2",
                &[id, &user],
            )
            .await?
            == 1
        {
            revoked.push(id.clone());
        }
    }
    tx.execute("DELETE FROM devices WHERE user_id = $1", &[&staging_id])
        .await?;
    tx.execute(
        "UPDATE devices SET user_id = $1 WHERE user_id = $2",
        &[&staging_id, &user],
    )
    .await?;
    tx.execute(
        "UPDATE devices SET key_generation = $1 WHERE id = $2",
        &[&next, &device_id],
    )
    .await?;
    tx.execute(
        "UPDATE users SET name = $1, retired_at = $2 WHERE id = $3",
        &[&retired_name(user), &now, &user],
    )
    .await?;
    tx.execute(
        "UPDATE users SET name = $1, password_hash = $2, created_at = $3, staging_of = NULL,
                staging_by = NULL, key_generation = $4, rotated_at = $5, rotated_by = $6,
                quota_bytes = (SELECT quota_bytes FROM users WHERE id = $8),
                disabled_at = (SELECT disabled_at FROM users WHERE id = $8)
         WHERE id = $7",
        &[
            &name,
            &password,
            &created,
            &next,
            &now,
            &by,
            &staging_id,
            &user,
        ],
    )
    .await?;
    tx.execute(
        "UPDATE invites SET used_by = $1 WHERE used_by = $2",
        &[&staging_id, &user],
    )
    .await?;
    tx.execute("DELETE FROM pair_slots WHERE user_id = $1", &[&user])
        .await?;
    tx.commit().await?;
    Ok(Committed {
        old_user: user,
        new_user: staging_id,
        generation: next,
        revoked,
    })
}

pub(super) async fn retired_users(s: &PgStore) -> StoreResult<Vec<UserId>> {
    let c = s.client().await?;
    Ok(
        c.query("SELECT id FROM users WHERE retired_at IS NOT NULL", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    )
}

pub(super) async fn retired_blobs(s: &PgStore, user: UserId) -> StoreResult<Vec<KeyedId>> {
    let c = s.client().await?;
    c.query("SELECT name FROM blobs WHERE user_id = $1", &[&user])
        .await?
        .iter()
        .map(|r| {
            r.get::<_, String>(0)
                .parse()
                .map_err(|e| StoreError::Backend(format!("corrupt blob name: {e}")))
        })
        .collect()
}

pub(super) async fn drop_retired(s: &PgStore, user: UserId) -> StoreResult<()> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let retired = tx
        .query_opt(
            "SELECT 1 FROM users WHERE id = $1 AND retired_at IS NOT NULL FOR UPDATE",
            &[&user],
        )
        .await?
        .is_some();
    if !retired {
        return Ok(());
    }
    for table in ACCOUNT_TABLES {
        tx.execute(
            format!("DELETE FROM {table} WHERE user_id = $1").as_str(),
            &[&user],
        )
        .await?;
    }
    tx.execute("DELETE FROM users WHERE id = $1", &[&user])
        .await?;
    tx.commit().await?;
    Ok(())
}
