//! Pairing slots (see [`crate::store::pairing`]). A transaction-scoped
//! advisory lock makes picking a slot number and inserting it one step
//! across replicas.

use evi_shared::api::PairState;

use super::*;
use crate::store::pairing::{hash_column, lowest_free, minted_before, parse_state, state_name};

/// The advisory lock of slot numbering (b"evipair" read as a number).
const NUMBERING_LOCK: i64 = 0x0065_7669_7061_6972;

fn column(number: u32) -> i32 {
    // Slot numbers stop at PAIR_SLOT_MAX, far below i32::MAX.
    i32::try_from(number).unwrap_or(i32::MAX)
}

pub(super) async fn open(s: &PgStore, slot: NewPairSlot) -> StoreResult<u32> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&NUMBERING_LOCK])
        .await?;
    tx.execute(
        "DELETE FROM pair_slots WHERE expires_at <= $1",
        &[&slot.now],
    )
    .await?;
    let taken: Vec<u32> = tx
        .query("SELECT number FROM pair_slots ORDER BY number", &[])
        .await?
        .iter()
        .map(|r| u32::try_from(r.get::<_, i32>(0)).unwrap_or(0))
        .collect();
    let number = lowest_free(taken)?;
    tx.execute(
        "INSERT INTO pair_slots (number, user_id, device_id, state, offer, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &column(number),
            &slot.user,
            &slot.device_id,
            &state_name(PairState::Open),
            &slot.offer,
            &slot.now,
            &slot.expires_at,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(number)
}

pub(super) async fn get(s: &PgStore, number: u32, now: i64) -> StoreResult<Option<PairSlot>> {
    let c = s.client().await?;
    let Some(r) = c
        .query_opt(
            "SELECT user_id, device_id, state, offer, hello, reply, join_hash, expires_at
             FROM pair_slots WHERE number = $1 AND expires_at > $2",
            &[&column(number), &now],
        )
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(PairSlot {
        number,
        user: r.get(0),
        device_id: r.get(1),
        state: parse_state(r.get::<_, &str>(2))?,
        offer: r.get(3),
        hello: r.get(4),
        reply: r.get(5),
        join_hash: hash_column(r.get(6))?,
        expires_at: r.get(7),
    }))
}

pub(super) async fn step(
    s: &PgStore,
    number: u32,
    from: PairState,
    step: PairStep,
    now: i64,
) -> StoreResult<bool> {
    let c = s.client().await?;
    let m = step.messages();
    let join_hash = step.join_hash.map(|h| h.to_vec());
    let changed = c
        .execute(
            "UPDATE pair_slots SET state = $1, join_hash = COALESCE($2, join_hash),
                 offer = $3, hello = $4, reply = $5
             WHERE number = $6 AND state = $7 AND expires_at > $8",
            &[
                &state_name(step.to),
                &join_hash,
                &m.offer,
                &m.hello,
                &m.reply,
                &column(number),
                &state_name(from),
                &now,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// See [`crate::store::Store::pair_mint`]. The user's row is locked first,
/// as every change of an account's devices takes it, then the slot's.
pub(super) async fn mint(
    s: &PgStore,
    number: u32,
    user: UserId,
    device: NewDevice,
    now: i64,
) -> StoreResult<Option<String>> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    lock_user(&tx, user).await?;
    let Some(made) = tx
        .query_opt(
            "SELECT minted_at, minted_device FROM pair_slots
             WHERE number = $1 AND user_id = $2 AND state = $3 AND expires_at > $4
             FOR UPDATE",
            &[&column(number), &user, &state_name(PairState::Joined), &now],
        )
        .await?
    else {
        return Ok(None);
    };
    let Some(before) = minted_before(made.get(0), made.get(1)) else {
        return Ok(None);
    };
    if let Some(id) = before {
        tx.execute(
            "DELETE FROM devices WHERE id = $1 AND user_id = $2",
            &[&id, &user],
        )
        .await?;
    }
    let id = device.id.clone();
    let name = super::accounts::insert_unique_device(&tx, user, device).await?;
    tx.execute(
        "UPDATE pair_slots SET minted_at = $1, minted_device = $2 WHERE number = $3",
        &[&now, &id, &column(number)],
    )
    .await?;
    tx.commit().await?;
    Ok(Some(name))
}
