//! [`Store`](super::Store)'s pairing slots for SQLite: each function runs
//! on the writer (or a reader) that [`super::sqlite::SqliteStore`] hands it.

use evi_shared::api::PairState;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::pairing::{
    NewPairSlot, PairSlot, clears_messages, is_live, lowest_free, parse_state, state_name,
};
use super::{StoreError, StoreResult};

const LIVE: &str = "('open', 'joined', 'replied')";

pub fn create(c: &mut Connection, slot: NewPairSlot, max_live: u32) -> StoreResult<u32> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute("DELETE FROM pair_slots WHERE expires_at <= ?1", [slot.now])?;
    let live: i64 = tx.query_row(
        &format!("SELECT COUNT(*) FROM pair_slots WHERE user_id = ?1 AND state IN {LIVE}"),
        [slot.user],
        |r| r.get(0),
    )?;
    if live >= i64::from(max_live) {
        return Err(StoreError::TooManyPairings);
    }
    let taken = {
        let mut st = tx.prepare("SELECT number FROM pair_slots ORDER BY number")?;
        st.query_map([], |r| r.get::<_, u32>(0))?
            .collect::<rusqlite::Result<Vec<u32>>>()?
    };
    let number = lowest_free(taken);
    tx.execute(
        "INSERT INTO pair_slots (number, user_id, device_id, state, offer, created_at, expires_at)
         VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?6)",
        params![
            number,
            slot.user,
            slot.device_id,
            slot.offer,
            slot.now,
            slot.expires_at
        ],
    )?;
    tx.commit()?;
    Ok(number)
}

pub fn get(c: &Connection, number: u32, now: i64) -> StoreResult<Option<PairSlot>> {
    let row = c
        .query_row(
            "SELECT user_id, device_id, state, offer, join_hash, hello, reply, expires_at
             FROM pair_slots WHERE number = ?1 AND expires_at > ?2",
            params![number, now],
            |r| {
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
            },
        )
        .optional()?;
    let Some((user, device_id, state, offer, join_hash, hello, reply, expires_at)) = row else {
        return Ok(None);
    };
    Ok(Some(PairSlot {
        number,
        user,
        device_id,
        state: parse_state(&state)
            .ok_or_else(|| StoreError::Backend(format!("pairing slot state {state:?}")))?,
        offer,
        join_hash: join_hash.and_then(|h| h.try_into().ok()),
        hello,
        reply,
        expires_at,
    }))
}

pub fn join(
    c: &mut Connection,
    number: u32,
    join_hash: [u8; 32],
    hello: Vec<u8>,
    now: i64,
) -> StoreResult<()> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let n = tx.execute(
        "UPDATE pair_slots SET state = 'joined', join_hash = ?1, hello = ?2
         WHERE number = ?3 AND state = 'open' AND expires_at > ?4",
        params![&join_hash[..], hello, number, now],
    )?;
    if n == 0 {
        let exists: Option<i64> = tx
            .query_row(
                "SELECT 1 FROM pair_slots WHERE number = ?1 AND expires_at > ?2",
                params![number, now],
                |r| r.get(0),
            )
            .optional()?;
        return Err(match exists {
            Some(_) => StoreError::PairTaken,
            None => StoreError::NotFound,
        });
    }
    tx.commit()?;
    Ok(())
}

pub fn advance(
    c: &mut Connection,
    number: u32,
    from: PairState,
    to: PairState,
    reply: Option<Vec<u8>>,
    now: i64,
) -> StoreResult<bool> {
    debug_assert!(is_live(from));
    let n = if clears_messages(to) {
        c.execute(
            "UPDATE pair_slots SET state = ?1, offer = NULL, hello = NULL, reply = NULL
             WHERE number = ?2 AND state = ?3 AND expires_at > ?4",
            params![state_name(to), number, state_name(from), now],
        )?
    } else {
        c.execute(
            "UPDATE pair_slots SET state = ?1, reply = COALESCE(?2, reply)
             WHERE number = ?3 AND state = ?4 AND expires_at > ?5",
            params![state_name(to), reply, number, state_name(from), now],
        )?
    };
    Ok(n == 1)
}
