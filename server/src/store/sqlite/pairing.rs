//! Pairing slots in the SQLite store (see [`crate::store::pairing`]). The single
//! writer makes picking a slot number and inserting it one step.

use evi_shared::api::PairState;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::store::pairing::{hash_column, lowest_free, minted_before, parse_state, state_name};
use crate::store::{NewDevice, NewPairSlot, PairSlot, PairStep, StoreResult, UserId};

pub(super) async fn open(s: &SqliteStore, slot: NewPairSlot) -> StoreResult<u32> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "DELETE FROM pair_slots WHERE expires_at <= ?1",
            [slot.now],
        )?;
        let taken = tx
            .prepare_cached("SELECT number FROM pair_slots ORDER BY number")?
            .query_map([], |r| r.get::<_, u32>(0))?
            .collect::<rusqlite::Result<Vec<u32>>>()?;
        let number = lowest_free(taken)?;
        tx.execute(
            "INSERT INTO pair_slots (number, user_id, device_id, state, offer, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                number,
                slot.user,
                slot.device_id,
                state_name(PairState::Open),
                slot.offer,
                slot.now,
                slot.expires_at
            ],
        )?;
        tx.commit()?;
        Ok(number)
    })
    .await
}

pub(super) async fn get(s: &SqliteStore, number: u32, now: i64) -> StoreResult<Option<PairSlot>> {
    s.read(move |c| {
        let row = c
            .prepare_cached(
                "SELECT user_id, device_id, state, offer, hello, reply, join_hash, expires_at
                 FROM pair_slots WHERE number = ?1 AND expires_at > ?2",
            )?
            .query_row(params![number, now], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<Vec<u8>>>(3)?,
                    r.get::<_, Option<Vec<u8>>>(4)?,
                    r.get::<_, Option<Vec<u8>>>(5)?,
                    r.get::<_, Option<Vec<u8>>>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })
            .optional()?;
        let Some((user, device_id, state, offer, hello, reply, join_hash, expires_at)) = row else {
            return Ok(None);
        };
        Ok(Some(PairSlot {
            number,
            user,
            device_id,
            state: parse_state(&state)?,
            offer,
            hello,
            reply,
            join_hash: hash_column(join_hash)?,
            expires_at,
        }))
    })
    .await
}

pub(super) async fn step(
    s: &SqliteStore,
    number: u32,
    from: PairState,
    step: PairStep,
    now: i64,
) -> StoreResult<bool> {
    s.write(move |c| {
        let m = step.messages();
        let changed = c.execute(
            "UPDATE pair_slots SET state = ?1, join_hash = COALESCE(?2, join_hash),
                 offer = ?3, hello = ?4, reply = ?5
             WHERE number = ?6 AND state = ?7 AND expires_at > ?8",
            params![
                state_name(step.to),
                step.join_hash.as_ref().map(|h| &h[..]),
                m.offer,
                m.hello,
                m.reply,
                number,
                state_name(from),
                now
            ],
        )?;
        Ok(changed == 1)
    })
    .await
}

/// See [`crate::store::Store::pair_mint`].
pub(super) async fn mint(
    s: &SqliteStore,
    number: u32,
    user: UserId,
    device: NewDevice,
    now: i64,
) -> StoreResult<Option<String>> {
    s.write(move |c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let made: Option<(Option<i64>, Option<String>)> = tx
            .query_row(
                "SELECT minted_at, minted_device FROM pair_slots
                 WHERE number = ?1 AND user_id = ?2 AND state = ?3 AND expires_at > ?4",
                params![number, user, state_name(PairState::Joined), now],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some(before) = made.and_then(|(at, device)| minted_before(at, device)) else {
            return Ok(None);
        };
        if let Some(id) = before {
            tx.execute(
                "DELETE FROM devices WHERE id = ?1 AND user_id = ?2",
                params![id, user],
            )?;
        }
        let id = device.id.clone();
        let name = super::accounts::insert_unique_device(&tx, user, device)?;
        tx.execute(
            "UPDATE pair_slots SET minted_at = ?1, minted_device = ?2 WHERE number = ?3",
            params![now, id, number],
        )?;
        tx.commit()?;
        Ok(Some(name))
    })
    .await
}
