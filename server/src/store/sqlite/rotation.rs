//! Key rotation in the SQLite store (see [`crate::store::rotation`]). The single
//! writer's immediate transaction makes the commit one step: no push,
//! login or pairing of the account runs between its check and its swap.

use evi_shared::KeyedId;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::store::rotation::{
    ACCOUNT_TABLES, Began, Begun, CommitRefused, Committed, NO_PASSWORD, NewKey, resumes,
    retired_name, staging_name,
};
use crate::store::{NewDevice, StoreError, StoreResult, UserId};

pub(super) async fn begin(
    s: &SqliteStore,
    user: UserId,
    d: NewDevice,
    by: String,
    key: NewKey,
) -> StoreResult<Begun> {
    let NewKey {
        check: key_check,
        proof_hash,
    } = key;
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (generation, staging_of): (i64, Option<i64>) = tx
            .query_row(
                "SELECT key_generation, staging_of FROM users
                 WHERE id = ?1 AND retired_at IS NULL",
                [user],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?
            .ok_or(StoreError::NotFound)?;
        if staging_of.is_some() {
            return Err(StoreError::NotFound);
        }
        let next = generation + 1;
        let found: Option<(i64, Option<Vec<u8>>, Option<String>)> = tx
            .query_row(
                "SELECT id, key_check, staging_by FROM users WHERE staging_of = ?1",
                [user],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let mut begun = Begun {
            generation: next,
            fresh: true,
            abandoned: false,
            abandoned_by: None,
        };
        let staging = match found {
            Some((id, kcv, owner))
                if resumes(kcv.as_deref(), owner.as_deref(), key_check.as_deref(), &by) =>
            {
                begun.fresh = false;
                tx.execute(
                    "UPDATE users SET staging_by = ?1, key_check = COALESCE(key_check, ?2),
                                      key_proof_hash = COALESCE(key_proof_hash, ?4)
                     WHERE id = ?3",
                    params![by, key_check, id, proof_hash],
                )?;
                id
            }
            found => {
                if let Some((id, _, owner)) = found {
                    begun.abandoned = true;
                    begun.abandoned_by = device_name(&tx, user, owner.as_deref())?;
                    retire_staging(&tx, id, d.now)?;
                }
                tx.execute(
                    "INSERT INTO users (name, password_hash, created_at, key_generation, staging_of,
                                        staging_by, key_check, key_proof_hash)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        staging_name(user),
                        NO_PASSWORD,
                        d.now,
                        next,
                        user,
                        by,
                        key_check,
                        proof_hash
                    ],
                )?;
                tx.last_insert_rowid()
            }
        };
        tx.execute("DELETE FROM devices WHERE user_id = ?1", [staging])?;
        tx.execute(
            "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at, key_generation)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
            params![d.id, staging, d.name, &d.token_hash[..], d.now, next],
        )?;
        tx.commit()?;
        Ok(begun)
    })
    .await
}

/// The name of `user`'s device `id`, when it has one.
fn device_name(
    tx: &rusqlite::Transaction<'_>,
    user: UserId,
    id: Option<&str>,
) -> StoreResult<Option<String>> {
    let Some(id) = id else { return Ok(None) };
    Ok(tx
        .query_row(
            "SELECT name FROM devices WHERE id = ?1 AND user_id = ?2",
            params![id, user],
            |r| r.get(0),
        )
        .optional()?)
}

/// Abandons the staging account `staging`: its device (and token) goes,
/// and it is retired, for [`crate::rotation::purge`] to delete.
pub(super) fn retire_staging(
    tx: &rusqlite::Transaction<'_>,
    staging: UserId,
    now: i64,
) -> StoreResult<()> {
    tx.execute("DELETE FROM devices WHERE user_id = ?1", [staging])?;
    tx.execute(
        "UPDATE users SET name = ?1, staging_of = NULL, retired_at = ?2 WHERE id = ?3",
        params![retired_name(staging), now, staging],
    )?;
    Ok(())
}

/// Abandons the rotation of `user` that `began_by` names, if one is
/// staged: what a revoke and a password change do in their transaction.
/// Whether one was.
pub(super) fn abandon(
    tx: &rusqlite::Transaction<'_>,
    user: UserId,
    began_by: Began<'_>,
    now: i64,
) -> StoreResult<bool> {
    let found: Option<(i64, Option<String>)> = tx
        .query_row(
            "SELECT id, staging_by FROM users WHERE staging_of = ?1",
            [user],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match found {
        Some((id, owner)) if began_by.matches(owner.as_deref()) => {
            retire_staging(tx, id, now)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

pub(super) async fn commit(
    s: &SqliteStore,
    user: UserId,
    device_id: String,
    through: u64,
    revoke: Vec<String>,
    now: i64,
) -> StoreResult<Committed> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (staging, kcv, owner): (i64, Option<Vec<u8>>, Option<String>) = tx
            .query_row(
                "SELECT id, key_check, staging_by FROM users WHERE staging_of = ?1",
                [user],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?
            .ok_or(CommitRefused::NotBegun)?;
        if owner.is_some_and(|o| o != device_id) {
            return Err(CommitRefused::NotYours.into());
        }
        if kcv.is_none() {
            return Err(CommitRefused::NoKeyCheck.into());
        }
        let (name, password, created, newest, generation): (String, String, i64, i64, i64) = tx
            .query_row(
                "SELECT name, password_hash, created_at, newest_seq, key_generation
                 FROM users WHERE id = ?1",
                [user],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )?;
        let newest = newest as u64;
        if newest != through {
            return Err(CommitRefused::Behind { newest, through }.into());
        }
        let by: String = tx.query_row(
            "SELECT name FROM devices WHERE id = ?1 AND user_id = ?2",
            params![device_id, user],
            |r| r.get(0),
        )?;
        let mut revoked = Vec::new();
        for id in revoke.iter().filter(|id| **id != device_id) {
            if tx.execute(
                "DELETE FROM devices WHERE id = ?1 AND user_id = ?2",
                params![id, user],
            )? == 1
            {
                revoked.push(id.clone());
            }
        }
        let next = generation + 1;
        tx.execute("DELETE FROM devices WHERE user_id = ?1", [staging])?;
        tx.execute(
            "UPDATE devices SET user_id = ?1 WHERE user_id = ?2",
            params![staging, user],
        )?;
        tx.execute(
            "UPDATE devices SET key_generation = ?1 WHERE id = ?2",
            params![next, device_id],
        )?;
        tx.execute(
            "UPDATE users SET name = ?1, retired_at = ?2 WHERE id = ?3",
            params![retired_name(user), now, user],
        )?;
        tx.execute(
            "UPDATE users SET name = ?1, password_hash = ?2, created_at = ?3, staging_of = NULL,
                    staging_by = NULL, key_generation = ?4, rotated_at = ?5, rotated_by = ?6,
                    quota_bytes = (SELECT quota_bytes FROM users WHERE id = ?8),
                    disabled_at = (SELECT disabled_at FROM users WHERE id = ?8)
             WHERE id = ?7",
            params![name, password, created, next, now, by, staging, user],
        )?;
        tx.execute(
            "UPDATE invites SET used_by = ?1 WHERE used_by = ?2",
            params![staging, user],
        )?;
        tx.execute("DELETE FROM pair_slots WHERE user_id = ?1", [user])?;
        tx.commit()?;
        Ok(Committed {
            old_user: user,
            new_user: staging,
            generation: next,
            revoked,
        })
    })
    .await
}

/// See [`crate::store::Store::expire_rotations`].
pub(super) async fn expire(s: &SqliteStore, begun_before: i64, now: i64) -> StoreResult<usize> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let stale = tx
            .prepare_cached(
                "SELECT id FROM users WHERE staging_of IS NOT NULL AND created_at < ?1",
            )?
            .query_map([begun_before], |r| r.get::<_, UserId>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for &id in &stale {
            retire_staging(&tx, id, now)?;
        }
        tx.commit()?;
        Ok(stale.len())
    })
    .await
}

pub(super) async fn retired_users(s: &SqliteStore) -> StoreResult<Vec<UserId>> {
    s.read(|c| {
        let mut st = c.prepare_cached("SELECT id FROM users WHERE retired_at IS NOT NULL")?;
        let ids = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<UserId>>>()?;
        Ok(ids)
    })
    .await
}

pub(super) async fn retired_blobs(s: &SqliteStore, user: UserId) -> StoreResult<Vec<KeyedId>> {
    s.read(move |c| {
        let mut st = c.prepare_cached("SELECT name FROM blobs WHERE user_id = ?1")?;
        let names = st
            .query_map([user], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        names
            .into_iter()
            .map(|n| {
                n.parse()
                    .map_err(|e| StoreError::Backend(format!("corrupt blob name: {e}")))
            })
            .collect()
    })
    .await
}

pub(super) async fn drop_retired(s: &SqliteStore, user: UserId) -> StoreResult<()> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let retired = tx
            .prepare_cached("SELECT 1 FROM users WHERE id = ?1 AND retired_at IS NOT NULL")?
            .exists([user])?;
        if !retired {
            return Ok(());
        }
        for table in ACCOUNT_TABLES {
            tx.execute(&format!("DELETE FROM {table} WHERE user_id = ?1"), [user])?;
        }
        tx.execute("DELETE FROM users WHERE id = ?1", [user])?;
        tx.commit()?;
        // The deleted rows' pages went through the write-ahead log, whose
        // older frames may still hold them: cut it down to nothing, as
        // after a forget (best effort: a busy reader delays it to the next).
        if let Err(e) = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "cannot checkpoint the write-ahead log after a purge");
        }
        Ok(())
    })
    .await
}
