//! Accounts, devices, keys and invites in the SQLite store.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::*;
use crate::store::rotation::{Began, Rotated};

/// The invite `?1` that a registration at `?2` may use: unused, unexpired.
const USABLE_INVITE: &str =
    "code_hash = ?1 AND used_by IS NULL AND (expires_at IS NULL OR expires_at > ?2)";

/// Inserts the device under a name no other device of the account has (see
/// [`unique_device_name`]) and returns it. Run inside an immediate
/// transaction on the writer: nothing can add a device between the look and
/// the insert.
pub(super) fn insert_unique_device(
    c: &Connection,
    user: UserId,
    mut d: NewDevice,
) -> StoreResult<String> {
    if let Some(stale) = &d.replaces {
        c.execute(
            "DELETE FROM devices WHERE id = ?1 AND user_id = ?2
               AND key_generation < (SELECT key_generation FROM users WHERE id = ?2)",
            params![stale, user],
        )?;
    }
    let names = {
        let mut st = c.prepare_cached("SELECT name FROM devices WHERE user_id = ?1")?;
        st.query_map([user], |r| {
            r.get::<_, String>(0).map(|n| crate::device_name::shown(&n))
        })?
        .collect::<rusqlite::Result<std::collections::HashSet<_>>>()?
    };
    d.name = unique_device_name(&d.name, |n| names.contains(&crate::device_name::shown(n)));
    c.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at, key_generation)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, (SELECT key_generation FROM users WHERE id = ?2))",
        params![d.id, user, d.name, &d.token_hash[..], d.now],
    )?;
    Ok(d.name)
}

pub(super) async fn create_user(
    s: &SqliteStore,
    name: &str,
    password_hash: String,
    invite_hash: Option<[u8; 32]>,
    device: NewDevice,
) -> StoreResult<UserId> {
    let name = name.to_owned();
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The invite first: without a valid code, nobody learns whether
        // a name is taken.
        if let Some(h) = invite_hash {
            let unused = tx
                .prepare_cached(&format!("SELECT 1 FROM invites WHERE {USABLE_INVITE}"))?
                .exists(params![&h[..], device.now])?;
            if !unused {
                return Err(StoreError::InvalidInvite);
            }
        }
        let exists: Option<i64> = tx
            .query_row(
                "SELECT id FROM users WHERE name = ?1 COLLATE NOCASE LIMIT 1",
                [&name],
                |r| r.get(0),
            )
            .optional()?;
        if exists.is_some() {
            return Err(StoreError::UserExists);
        }
        tx.execute(
            "INSERT INTO users (name, password_hash, created_at) VALUES (?1, ?2, ?3)",
            params![name, password_hash, device.now],
        )?;
        let user = tx.last_insert_rowid();
        if let Some(h) = invite_hash {
            let n = tx.execute(
                "UPDATE invites SET used_by = ?1 WHERE code_hash = ?2 AND used_by IS NULL",
                params![user, &h[..]],
            )?;
            if n != 1 {
                return Err(StoreError::InvalidInvite);
            }
        }
        insert_unique_device(&tx, user, device)?;
        tx.commit()?;
        Ok(user)
    })
    .await
}

pub(super) async fn credentials(s: &SqliteStore, name: &str) -> StoreResult<Option<Credentials>> {
    let name = name.to_owned();
    s.read(move |c| {
        // The exact spelling first; two rows and neither exact is a name
        // that two accounts from before the case rule share.
        let mut st = c.prepare_cached(
            "SELECT id, name, password_hash, disabled_at IS NOT NULL
             FROM users WHERE name = ?1 COLLATE NOCASE
             ORDER BY name = ?1 DESC, id LIMIT 2",
        )?;
        let rows = st
            .query_map([&name], |r| {
                Ok(Credentials {
                    user_id: r.get(0)?,
                    name: r.get(1)?,
                    password_hash: r.get(2)?,
                    disabled: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut rows = rows.into_iter();
        Ok(match (rows.next(), rows.next()) {
            (Some(first), _) if first.name == name => Some(first),
            (Some(only), None) => Some(only),
            _ => None,
        })
    })
    .await
}

pub(super) async fn add_device(
    s: &SqliteStore,
    user: UserId,
    device: NewDevice,
) -> StoreResult<String> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let name = insert_unique_device(&tx, user, device)?;
        tx.commit()?;
        Ok(name)
    })
    .await
}

pub(super) async fn token_owner(
    s: &SqliteStore,
    token_hash: [u8; 32],
) -> StoreResult<Option<TokenOwner>> {
    s.read(move |c| {
        Ok(c.query_row(
            "SELECT d.user_id, u.name, d.id, d.token_hash, d.last_seen_at,
                    d.key_generation < u.key_generation, u.rotated_at, u.rotated_by,
                    u.disabled_at IS NOT NULL OR o.disabled_at IS NOT NULL,
                    CASE WHEN o.id IS NULL THEN u.quota_bytes ELSE o.quota_bytes END,
                    o.bytes_used
             FROM devices d JOIN users u ON u.id = d.user_id
             LEFT JOIN users o ON o.id = u.staging_of
             WHERE d.token_hash = ?1",
            [&token_hash[..]],
            |r| {
                let h: Vec<u8> = r.get(3)?;
                let mut token_hash = [0u8; 32];
                if h.len() == 32 {
                    token_hash.copy_from_slice(&h);
                }
                Ok(TokenOwner {
                    user_id: r.get(0)?,
                    user_name: r.get(1)?,
                    device_id: r.get(2)?,
                    token_hash,
                    last_seen_at: r.get(4)?,
                    rotated: r.get::<_, bool>(5)?.then(|| Rotated {
                        at: r.get::<_, Option<i64>>(6).ok().flatten().unwrap_or(0),
                        by: r
                            .get::<_, Option<String>>(7)
                            .ok()
                            .flatten()
                            .unwrap_or_default(),
                    }),
                    disabled: r.get(8)?,
                    quota_bytes: r.get(9)?,
                    copy_of_bytes: r.get(10)?,
                })
            },
        )
        .optional()?)
    })
    .await
}

pub(super) async fn touch_device(s: &SqliteStore, device_id: &str, now: i64) -> StoreResult<()> {
    let id = device_id.to_owned();
    s.write(move |c| {
        c.execute(
            "UPDATE devices SET last_seen_at = ?1 WHERE id = ?2",
            params![now, id],
        )?;
        Ok(())
    })
    .await
}

pub(super) async fn devices(
    s: &SqliteStore,
    user: UserId,
    after: Option<String>,
    limit: u32,
) -> StoreResult<Vec<DeviceRow>> {
    s.read(move |c| {
        let mut st = c.prepare_cached(
            "SELECT d.id, d.name, d.created_at, d.last_seen_at, d.key_generation,
                    d.key_generation >= u.key_generation
             FROM devices d JOIN users u ON u.id = d.user_id
             WHERE d.user_id = ?1 AND d.id > ?2 ORDER BY d.id LIMIT ?3",
        )?;
        let after = after.unwrap_or_default();
        let rows = st.query_map(params![user, after, limit], |r| {
            Ok(DeviceRow {
                id: r.get(0)?,
                name: r.get(1)?,
                created_at: r.get(2)?,
                last_seen_at: r.get(3)?,
                key_generation: r.get(4)?,
                current_key: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    })
    .await
}

pub(super) async fn revoke_device(
    s: &SqliteStore,
    user: UserId,
    device_id: &str,
) -> StoreResult<bool> {
    let id = device_id.to_owned();
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "DELETE FROM devices WHERE id = ?1 AND user_id = ?2",
            params![id, user],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        let now = chrono::Utc::now().timestamp();
        let ended = rotation::abandon(&tx, user, Began::By(&id), now)?;
        tx.commit()?;
        Ok(ended)
    })
    .await
}

pub(super) async fn change_password(
    s: &SqliteStore,
    user: UserId,
    hash: String,
    keep: &str,
) -> StoreResult<u64> {
    let keep = keep.to_owned();
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "UPDATE users SET password_hash = ?1 WHERE id = ?2",
            params![hash, user],
        )?;
        let n = tx.execute(
            "DELETE FROM devices WHERE user_id = ?1 AND id != ?2",
            params![user, keep],
        )?;
        let now = chrono::Utc::now().timestamp();
        rotation::abandon(&tx, user, Began::NotBy(&keep), now)?;
        tx.commit()?;
        Ok(n as u64)
    })
    .await
}

pub(super) async fn key_check(s: &SqliteStore, user: UserId) -> StoreResult<Option<Vec<u8>>> {
    s.read(move |c| {
        Ok(
            c.query_row("SELECT key_check FROM users WHERE id = ?1", [user], |r| {
                r.get(0)
            })?,
        )
    })
    .await
}

pub(super) async fn set_key_check(
    s: &SqliteStore,
    user: UserId,
    value: Vec<u8>,
) -> StoreResult<()> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cur: Option<Vec<u8>> =
            tx.query_row("SELECT key_check FROM users WHERE id = ?1", [user], |r| {
                r.get(0)
            })?;
        match cur {
            Some(v) if v == value => Ok(()),
            Some(_) => Err(StoreError::KeyCheckMismatch),
            None => {
                tx.execute(
                    "UPDATE users SET key_check = ?1 WHERE id = ?2",
                    params![value, user],
                )?;
                tx.commit()?;
                Ok(())
            }
        }
    })
    .await
}

pub(super) async fn key_proof_hash(s: &SqliteStore, user: UserId) -> StoreResult<Option<Vec<u8>>> {
    s.read(move |c| {
        Ok(c.query_row(
            "SELECT key_proof_hash FROM users WHERE id = ?1",
            [user],
            |r| r.get(0),
        )?)
    })
    .await
}

pub(super) async fn set_key_proof_hash(
    s: &SqliteStore,
    user: UserId,
    hash: Vec<u8>,
    replace: bool,
) -> StoreResult<()> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cur: Option<Vec<u8>> = tx.query_row(
            "SELECT key_proof_hash FROM users WHERE id = ?1",
            [user],
            |r| r.get(0),
        )?;
        match cur {
            Some(v) if v == hash => Ok(()),
            Some(_) if !replace => Err(StoreError::KeyProofMismatch),
            _ => {
                tx.execute(
                    "UPDATE users SET key_proof_hash = ?1 WHERE id = ?2",
                    params![hash, user],
                )?;
                tx.commit()?;
                Ok(())
            }
        }
    })
    .await
}

pub(super) async fn create_invite(
    s: &SqliteStore,
    code_hash: [u8; 32],
    now: i64,
    expires_at: Option<i64>,
) -> StoreResult<()> {
    s.write(move |c| {
        c.execute(
            "INSERT INTO invites (code_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
            params![&code_hash[..], now, expires_at],
        )?;
        Ok(())
    })
    .await
}

pub(super) async fn invite_usable(
    s: &SqliteStore,
    code_hash: [u8; 32],
    now: i64,
) -> StoreResult<bool> {
    s.read(move |c| {
        Ok(
            c.prepare_cached(&format!("SELECT 1 FROM invites WHERE {USABLE_INVITE}"))?
                .exists(params![&code_hash[..], now])?,
        )
    })
    .await
}

pub(super) async fn totals(s: &SqliteStore) -> StoreResult<Totals> {
    s.read(|c| {
        Ok(c.query_row(
            "SELECT (SELECT COUNT(*) FROM users), (SELECT COUNT(*) FROM devices),
                    COALESCE(SUM(record_count), 0), COALESCE(SUM(entry_count), 0),
                    COALESCE(SUM(blob_count), 0)
             FROM users",
            [],
            |r| {
                let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok(Totals {
                    users: n(0)?,
                    devices: n(1)?,
                    records: n(2)?,
                    entries: n(3)?,
                    blobs: n(4)?,
                })
            },
        )?)
    })
    .await
}
