//! The operator's account calls on the SQLite store (see [`crate::store::admin`]).

use evi_shared::api::Registration;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::store::admin::{AccountRow, InviteRow, REGISTRATION, parse_registration};
use crate::store::rotation::retired_name;
use crate::store::{StoreResult, UserId};

pub(super) async fn accounts(s: &SqliteStore) -> StoreResult<Vec<AccountRow>> {
    s.read(|c| {
        let mut st = c.prepare(
            "SELECT u.id, u.name, u.created_at, COUNT(d.id), MAX(d.last_seen_at),
                    u.record_count, u.entry_count, u.blob_count, u.bytes_used, u.disabled_at,
                    u.quota_bytes
             FROM users u LEFT JOIN devices d ON d.user_id = u.id
             WHERE u.staging_of IS NULL AND u.retired_at IS NULL
             GROUP BY u.id ORDER BY u.name, u.id",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok(AccountRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    devices: r.get(3)?,
                    last_seen_at: r.get(4)?,
                    records: r.get(5)?,
                    entries: r.get(6)?,
                    blobs: r.get(7)?,
                    bytes_used: r.get(8)?,
                    disabled_at: r.get(9)?,
                    quota_bytes: r.get(10)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    })
    .await
}

pub(super) async fn set_disabled(
    s: &SqliteStore,
    user: UserId,
    at: Option<i64>,
) -> StoreResult<bool> {
    s.write(move |c| {
        let n = c.execute(
            "UPDATE users SET disabled_at = ?1
             WHERE id = ?2 AND staging_of IS NULL AND retired_at IS NULL",
            params![at, user],
        )?;
        Ok(n > 0)
    })
    .await
}

pub(super) async fn retire_account(s: &SqliteStore, user: UserId, now: i64) -> StoreResult<bool> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let live = tx
            .query_row(
                "SELECT 1 FROM users WHERE id = ?1 AND staging_of IS NULL AND retired_at IS NULL",
                [user],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if !live {
            return Ok(false);
        }
        // A rotation under way goes with its account.
        let staging: Option<i64> = tx
            .query_row("SELECT id FROM users WHERE staging_of = ?1", [user], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(id) = staging {
            super::rotation::retire_staging(&tx, id, now)?;
        }
        tx.execute("DELETE FROM devices WHERE user_id = ?1", [user])?;
        tx.execute(
            "UPDATE users SET name = ?1, retired_at = ?2 WHERE id = ?3",
            params![retired_name(user), now, user],
        )?;
        tx.commit()?;
        Ok(true)
    })
    .await
}

pub(super) async fn set_quota(
    s: &SqliteStore,
    user: UserId,
    quota: Option<i64>,
) -> StoreResult<bool> {
    s.write(move |c| {
        let n = c.execute(
            "UPDATE users SET quota_bytes = ?1
             WHERE id = ?2 AND staging_of IS NULL AND retired_at IS NULL",
            params![quota, user],
        )?;
        Ok(n > 0)
    })
    .await
}

pub(super) async fn invites(s: &SqliteStore) -> StoreResult<Vec<InviteRow>> {
    s.read(|c| {
        let mut st = c.prepare(
            "SELECT i.code_hash, i.created_at, i.expires_at, u.name
             FROM invites i LEFT JOIN users u ON u.id = i.used_by
             ORDER BY i.created_at, i.code_hash",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok(InviteRow {
                    code_hash: r.get(0)?,
                    created_at: r.get(1)?,
                    expires_at: r.get(2)?,
                    used_by: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    })
    .await
}

pub(super) async fn expire_invite(
    s: &SqliteStore,
    code_hash: Vec<u8>,
    at: i64,
) -> StoreResult<bool> {
    s.write(move |c| {
        let n = c.execute(
            "UPDATE invites SET expires_at = ?1 WHERE code_hash = ?2 AND used_by IS NULL",
            params![at, code_hash],
        )?;
        Ok(n > 0)
    })
    .await
}

pub(super) async fn revoke_invite(s: &SqliteStore, code_hash: Vec<u8>) -> StoreResult<bool> {
    s.write(move |c| {
        let n = c.execute(
            "DELETE FROM invites WHERE code_hash = ?1 AND used_by IS NULL",
            [code_hash],
        )?;
        Ok(n > 0)
    })
    .await
}

pub(super) async fn registration(s: &SqliteStore) -> StoreResult<Option<Registration>> {
    s.read(|c| {
        let v: Option<String> = c
            .prepare_cached("SELECT value FROM server_settings WHERE name = ?1")?
            .query_row([REGISTRATION], |r| r.get(0))
            .optional()?;
        Ok(v.as_deref().and_then(parse_registration))
    })
    .await
}

pub(super) async fn set_registration(s: &SqliteStore, mode: Registration) -> StoreResult<()> {
    s.write(move |c| {
        c.execute(
            "INSERT INTO server_settings (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            params![REGISTRATION, mode.to_string()],
        )?;
        Ok(())
    })
    .await
}
