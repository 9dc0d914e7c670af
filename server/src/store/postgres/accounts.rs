//! Users, devices, key checks and invites.

use super::*;
use crate::store::rotation::Began;

/// Inserts the device under a name no other device of the account has (see
/// [`unique_device_name`]) and returns it; the caller holds the user's row
/// lock, so no other device of the account can appear between the look and
/// the insert.
pub(super) async fn insert_unique_device(
    tx: &deadpool_postgres::Transaction<'_>,
    user: UserId,
    mut d: NewDevice,
) -> StoreResult<String> {
    if let Some(stale) = &d.replaces {
        tx.execute(
            "DELETE FROM devices WHERE id = $1 AND user_id = $2
               AND key_generation < (SELECT key_generation FROM users WHERE id = $2)",
            &[stale, &user],
        )
        .await?;
    }
    let names: HashSet<String> = tx
        .query("SELECT name FROM devices WHERE user_id = $1", &[&user])
        .await?
        .iter()
        .map(|r| crate::device_name::shown(r.get(0)))
        .collect();
    d.name = unique_device_name(&d.name, |n| names.contains(&crate::device_name::shown(n)));
    tx.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at, key_generation)
         VALUES ($1, $2, $3, $4, $5, $5, (SELECT key_generation FROM users WHERE id = $2))",
        &[&d.id, &user, &d.name, &&d.token_hash[..], &d.now],
    )
    .await?;
    Ok(d.name)
}

pub(super) async fn create_user(
    s: &PgStore,
    name: &str,
    password_hash: String,
    invite_hash: Option<[u8; 32]>,
    device: NewDevice,
) -> StoreResult<UserId> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    // The invite first: without a valid code, nobody learns whether a name
    // is taken. Locked, so two registrations with one code cannot both pass.
    if let Some(h) = invite_hash {
        let unused = tx
            .query_opt(
                &format!("SELECT 1 FROM invites WHERE {USABLE_INVITE} FOR UPDATE"),
                &[&&h[..], &device.now],
            )
            .await?;
        if unused.is_none() {
            return Err(StoreError::InvalidInvite);
        }
    }
    let exists = tx
        .query_opt(
            "SELECT 1 FROM users WHERE lower(name) = lower($1) LIMIT 1",
            &[&name],
        )
        .await?;
    if exists.is_some() {
        return Err(StoreError::UserExists);
    }
    // A registration of the same name through another replica may commit
    // between the look and the insert: the unique index says so.
    let user: UserId = match tx
        .query_one(
            "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3) RETURNING id",
            &[&name, &password_hash, &device.now],
        )
        .await
    {
        Ok(r) => r.get(0),
        Err(e) if is_unique_violation(&e) => return Err(StoreError::UserExists),
        Err(e) => return Err(e.into()),
    };
    if let Some(h) = invite_hash {
        let n = tx
            .execute(
                "UPDATE invites SET used_by = $1 WHERE code_hash = $2 AND used_by IS NULL",
                &[&user, &&h[..]],
            )
            .await?;
        if n != 1 {
            return Err(StoreError::InvalidInvite);
        }
    }
    insert_unique_device(&tx, user, device).await?;
    tx.commit().await?;
    Ok(user)
}

pub(super) async fn credentials(s: &PgStore, name: &str) -> StoreResult<Option<Credentials>> {
    let c = s.client().await?;
    // The unique index allows one spelling per name; the exact-first order
    // keeps the SQLite store's rule should a copied database hold two.
    let rows = c
        .query(
            "SELECT id, name, password_hash, disabled_at IS NOT NULL
             FROM users WHERE lower(name) = lower($1)
             ORDER BY name = $1 DESC, id LIMIT 2",
            &[&name],
        )
        .await?;
    let mut rows = rows.into_iter().map(|r| Credentials {
        user_id: r.get(0),
        name: r.get(1),
        password_hash: r.get(2),
        disabled: r.get(3),
    });
    Ok(match (rows.next(), rows.next()) {
        (Some(first), _) if first.name == name => Some(first),
        (Some(only), None) => Some(only),
        _ => None,
    })
}

pub(super) async fn add_device(
    s: &PgStore,
    user: UserId,
    device: NewDevice,
) -> StoreResult<String> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    let name = insert_unique_device(&tx, user, device).await?;
    tx.commit().await?;
    Ok(name)
}

pub(super) async fn token_owner(
    s: &PgStore,
    token_hash: [u8; 32],
) -> StoreResult<Option<TokenOwner>> {
    let c = s.client().await?;
    let row = c
        .query_opt(
            "SELECT d.user_id, u.name, d.id, d.token_hash, d.last_seen_at,
                    d.key_generation < u.key_generation, u.rotated_at, u.rotated_by,
                    u.disabled_at IS NOT NULL OR o.disabled_at IS NOT NULL,
                    CASE WHEN o.id IS NULL THEN u.quota_bytes ELSE o.quota_bytes END,
                    o.bytes_used
             FROM devices d JOIN users u ON u.id = d.user_id
             LEFT JOIN users o ON o.id = u.staging_of
             WHERE d.token_hash = $1",
            &[&&token_hash[..]],
        )
        .await?;
    Ok(row.map(|r| {
        let h: &[u8] = r.get(3);
        let mut token_hash = [0u8; 32];
        if h.len() == 32 {
            token_hash.copy_from_slice(h);
        }
        TokenOwner {
            user_id: r.get(0),
            user_name: r.get(1),
            device_id: r.get(2),
            token_hash,
            last_seen_at: r.get(4),
            rotated: r
                .get::<_, bool>(5)
                .then(|| crate::store::rotation::Rotated {
                    at: r.get::<_, Option<i64>>(6).unwrap_or(0),
                    by: r.get::<_, Option<String>>(7).unwrap_or_default(),
                }),
            disabled: r.get(8),
            quota_bytes: r.get(9),
            copy_of_bytes: r.get(10),
        }
    }))
}

pub(super) async fn touch_device(s: &PgStore, device_id: &str, now: i64) -> StoreResult<()> {
    let c = s.client().await?;
    c.execute(
        "UPDATE devices SET last_seen_at = $1 WHERE id = $2",
        &[&now, &device_id],
    )
    .await?;
    Ok(())
}

pub(super) async fn devices(
    s: &PgStore,
    user: UserId,
    after: Option<String>,
    limit: u32,
) -> StoreResult<Vec<DeviceRow>> {
    let c = s.client().await?;
    let after = after.unwrap_or_default();
    Ok(c.query(
        "SELECT d.id, d.name, d.created_at, d.last_seen_at, d.key_generation,
                d.key_generation >= u.key_generation
         FROM devices d JOIN users u ON u.id = d.user_id
         WHERE d.user_id = $1 AND d.id COLLATE \"C\" > $2
         ORDER BY d.id COLLATE \"C\" LIMIT $3",
        &[&user, &after, &i64::from(limit)],
    )
    .await?
    .into_iter()
    .map(|r| DeviceRow {
        id: r.get(0),
        name: r.get(1),
        created_at: r.get(2),
        last_seen_at: r.get(3),
        key_generation: r.get(4),
        current_key: r.get(5),
    })
    .collect())
}

pub(super) async fn revoke_device(s: &PgStore, user: UserId, device_id: &str) -> StoreResult<bool> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    let n = tx
        .execute(
            "DELETE FROM devices WHERE id = $1 AND user_id = $2",
            &[&device_id, &user],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    let now = chrono::Utc::now().timestamp();
    let ended = super::rotation::abandon(&tx, user, Began::By(device_id), now).await?;
    // Waits of the revoked device parked on other replicas end at once:
    // the delete announces itself (migration 7, `listen`).
    tx.commit().await?;
    Ok(ended)
}

pub(super) async fn change_password(
    s: &PgStore,
    user: UserId,
    hash: String,
    keep: &str,
) -> StoreResult<u64> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    tx.execute(
        "UPDATE users SET password_hash = $1 WHERE id = $2",
        &[&hash, &user],
    )
    .await?;
    let n = tx
        .execute(
            "DELETE FROM devices WHERE user_id = $1 AND id <> $2",
            &[&user, &keep],
        )
        .await?;
    let now = chrono::Utc::now().timestamp();
    super::rotation::abandon(&tx, user, Began::NotBy(keep), now).await?;
    tx.commit().await?;
    Ok(n)
}

pub(super) async fn key_check(s: &PgStore, user: UserId) -> StoreResult<Option<Vec<u8>>> {
    let c = s.client().await?;
    let row = c
        .query_opt("SELECT key_check FROM users WHERE id = $1", &[&user])
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok(row.get(0))
}

pub(super) async fn set_key_check(s: &PgStore, user: UserId, value: Vec<u8>) -> StoreResult<()> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let cur: Option<Vec<u8>> = tx
        .query_opt(
            "SELECT key_check FROM users WHERE id = $1 FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?
        .get(0);
    match cur {
        Some(v) if v == value => Ok(()),
        Some(_) => Err(StoreError::KeyCheckMismatch),
        None => {
            tx.execute(
                "UPDATE users SET key_check = $1 WHERE id = $2",
                &[&value, &user],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        }
    }
}

pub(super) async fn key_proof_hash(s: &PgStore, user: UserId) -> StoreResult<Option<Vec<u8>>> {
    let c = s.client().await?;
    let row = c
        .query_opt("SELECT key_proof_hash FROM users WHERE id = $1", &[&user])
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok(row.get(0))
}

pub(super) async fn set_key_proof_hash(
    s: &PgStore,
    user: UserId,
    hash: Vec<u8>,
    replace: bool,
) -> StoreResult<()> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    let cur: Option<Vec<u8>> = tx
        .query_opt(
            "SELECT key_proof_hash FROM users WHERE id = $1 FOR UPDATE",
            &[&user],
        )
        .await?
        .ok_or(StoreError::NotFound)?
        .get(0);
    match cur {
        Some(v) if v == hash => Ok(()),
        Some(_) if !replace => Err(StoreError::KeyProofMismatch),
        _ => {
            tx.execute(
                "UPDATE users SET key_proof_hash = $1 WHERE id = $2",
                &[&hash, &user],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        }
    }
}

/// The invite `$1` that a registration at `$2` may use: unused, unexpired.
const USABLE_INVITE: &str =
    "code_hash = $1 AND used_by IS NULL AND (expires_at IS NULL OR expires_at > $2)";

pub(super) async fn create_invite(
    s: &PgStore,
    code_hash: [u8; 32],
    now: i64,
    expires_at: Option<i64>,
) -> StoreResult<()> {
    let c = s.client().await?;
    c.execute(
        "INSERT INTO invites (code_hash, created_at, expires_at) VALUES ($1, $2, $3)",
        &[&&code_hash[..], &now, &expires_at],
    )
    .await?;
    Ok(())
}

pub(super) async fn invite_usable(s: &PgStore, code_hash: [u8; 32], now: i64) -> StoreResult<bool> {
    let c = s.client().await?;
    Ok(c.query_opt(
        &format!("SELECT 1 FROM invites WHERE {USABLE_INVITE}"),
        &[&&code_hash[..], &now],
    )
    .await?
    .is_some())
}

pub(super) async fn totals(s: &PgStore) -> StoreResult<Totals> {
    let c = s.client().await?;
    let r = c
        .query_one(
            "SELECT (SELECT COUNT(*) FROM users), (SELECT COUNT(*) FROM devices),
                    COALESCE(SUM(record_count), 0)::BIGINT, COALESCE(SUM(entry_count), 0)::BIGINT,
                    COALESCE(SUM(blob_count), 0)::BIGINT
             FROM users",
            &[],
        )
        .await?;
    let n = |i| r.get::<_, i64>(i).max(0) as u64;
    Ok(Totals {
        users: n(0),
        devices: n(1),
        records: n(2),
        entries: n(3),
        blobs: n(4),
    })
}
