//! The operator's account calls (see [`crate::store::admin`]).

use super::*;
use crate::store::admin::{AccountRow, InviteRow, REGISTRATION, parse_registration};
use crate::store::rotation::retired_name;
use evi_shared::api::Registration;

pub(super) async fn accounts(s: &PgStore) -> StoreResult<Vec<AccountRow>> {
    let c = s.client().await?;
    let rows = c
        .query(
            "SELECT u.id, u.name, u.created_at, COUNT(d.id), MAX(d.last_seen_at),
                    u.record_count, u.entry_count, u.blob_count, u.bytes_used, u.disabled_at,
                    u.quota_bytes
             FROM users u LEFT JOIN devices d ON d.user_id = u.id
             WHERE u.staging_of IS NULL AND u.retired_at IS NULL
             GROUP BY u.id ORDER BY u.name, u.id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| AccountRow {
            id: r.get(0),
            name: r.get(1),
            created_at: r.get(2),
            devices: r.get(3),
            last_seen_at: r.get(4),
            records: r.get(5),
            entries: r.get(6),
            blobs: r.get(7),
            bytes_used: r.get(8),
            disabled_at: r.get(9),
            quota_bytes: r.get(10),
        })
        .collect())
}

pub(super) async fn set_disabled(s: &PgStore, user: UserId, at: Option<i64>) -> StoreResult<bool> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let n = tx
        .execute(
            "UPDATE users SET disabled_at = $1
             WHERE id = $2 AND staging_of IS NULL AND retired_at IS NULL",
            &[&at, &user],
        )
        .await?;
    tx.commit().await?;
    Ok(n > 0)
}

pub(super) async fn retire_account(s: &PgStore, user: UserId, now: i64) -> StoreResult<bool> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    // The row lock every push takes: no record commits under the account
    // once it is retired.
    let live = tx
        .query_opt(
            "SELECT 1 FROM users WHERE id = $1 AND staging_of IS NULL AND retired_at IS NULL
             FOR UPDATE",
            &[&user],
        )
        .await?
        .is_some();
    if !live {
        return Ok(false);
    }
    let staging = tx
        .query_opt(
            "SELECT id FROM users WHERE staging_of = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    if let Some(r) = staging {
        super::rotation::retire_staging(&tx, r.get(0), now).await?;
    }
    // Waits of its devices parked on any replica end at once: the delete
    // announces itself (migration 7, `listen`).
    tx.execute("DELETE FROM devices WHERE user_id = $1", &[&user])
        .await?;
    tx.execute(
        "UPDATE users SET name = $1, retired_at = $2 WHERE id = $3",
        &[&retired_name(user), &now, &user],
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn set_quota(s: &PgStore, user: UserId, quota: Option<i64>) -> StoreResult<bool> {
    let c = s.client().await?;
    let n = c
        .execute(
            "UPDATE users SET quota_bytes = $1
             WHERE id = $2 AND staging_of IS NULL AND retired_at IS NULL",
            &[&quota, &user],
        )
        .await?;
    Ok(n > 0)
}

pub(super) async fn invites(s: &PgStore) -> StoreResult<Vec<InviteRow>> {
    let c = s.client().await?;
    let rows = c
        .query(
            "SELECT i.code_hash, i.created_at, i.expires_at, u.name
             FROM invites i LEFT JOIN users u ON u.id = i.used_by
             ORDER BY i.created_at, i.code_hash",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| InviteRow {
            code_hash: r.get(0),
            created_at: r.get(1),
            expires_at: r.get(2),
            used_by: r.get(3),
        })
        .collect())
}

pub(super) async fn expire_invite(s: &PgStore, code_hash: Vec<u8>, at: i64) -> StoreResult<bool> {
    let c = s.client().await?;
    let n = c
        .execute(
            "UPDATE invites SET expires_at = $1 WHERE code_hash = $2 AND used_by IS NULL",
            &[&at, &code_hash],
        )
        .await?;
    Ok(n > 0)
}

pub(super) async fn revoke_invite(s: &PgStore, code_hash: Vec<u8>) -> StoreResult<bool> {
    let c = s.client().await?;
    let n = c
        .execute(
            "DELETE FROM invites WHERE code_hash = $1 AND used_by IS NULL",
            &[&code_hash],
        )
        .await?;
    Ok(n > 0)
}

pub(super) async fn registration(s: &PgStore) -> StoreResult<Option<Registration>> {
    let c = s.client().await?;
    let row = c
        .query_opt(
            "SELECT value FROM server_settings WHERE name = $1",
            &[&REGISTRATION],
        )
        .await?;
    Ok(row.and_then(|r| parse_registration(r.get::<_, &str>(0))))
}

pub(super) async fn set_registration(s: &PgStore, mode: Registration) -> StoreResult<()> {
    let c = s.client().await?;
    c.execute(
        "INSERT INTO server_settings (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&REGISTRATION, &mode.to_string()],
    )
    .await?;
    Ok(())
}
