//! Pairing slots in Postgres: one row per slot, so a joiner and a creator
//! served by different replicas meet in it. Slot numbers are picked under
//! a table lock (slots are made a few times a day, never in bulk), so two
//! replicas never hand out one number.

use evi_shared::api::PairState;

use super::*;
use crate::store::pairing::{
    NewPairSlot, PairSlot, clears_messages, lowest_free, parse_state, state_name,
};

pub(super) async fn create(s: &PgStore, slot: NewPairSlot, max_live: u32) -> StoreResult<u32> {
    let mut c = s.client().await?;
    let tx = c.transaction().await?;
    tx.execute("LOCK TABLE pair_slots IN EXCLUSIVE MODE", &[])
        .await?;
    tx.execute(
        "DELETE FROM pair_slots WHERE expires_at <= $1",
        &[&slot.now],
    )
    .await?;
    let live: i64 = tx
        .query_one(
            "SELECT COUNT(*) FROM pair_slots
             WHERE user_id = $1 AND state IN ('open', 'joined', 'replied')",
            &[&slot.user],
        )
        .await?
        .get(0);
    if live >= i64::from(max_live) {
        return Err(StoreError::TooManyPairings);
    }
    let taken: Vec<u32> = tx
        .query("SELECT number FROM pair_slots ORDER BY number", &[])
        .await?
        .iter()
        .map(|r| r.get::<_, i64>(0) as u32)
        .collect();
    let number = lowest_free(taken);
    tx.execute(
        "INSERT INTO pair_slots (number, user_id, device_id, state, offer, created_at, expires_at)
         VALUES ($1, $2, $3, 'open', $4, $5, $6)",
        &[
            &i64::from(number),
            &slot.user,
            &slot.device_id,
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
            "SELECT user_id, device_id, state, offer, join_hash, hello, reply, expires_at
             FROM pair_slots WHERE number = $1 AND expires_at > $2",
            &[&i64::from(number), &now],
        )
        .await?
    else {
        return Ok(None);
    };
    let state: String = r.get(2);
    Ok(Some(PairSlot {
        number,
        user: r.get(0),
        device_id: r.get(1),
        state: parse_state(&state)
            .ok_or_else(|| StoreError::Backend(format!("pairing slot state {state:?}")))?,
        offer: r.get(3),
        join_hash: r
            .get::<_, Option<Vec<u8>>>(4)
            .and_then(|h| h.try_into().ok()),
        hello: r.get(5),
        reply: r.get(6),
        expires_at: r.get(7),
    }))
}

pub(super) async fn join(
    s: &PgStore,
    number: u32,
    join_hash: [u8; 32],
    hello: Vec<u8>,
    now: i64,
) -> StoreResult<()> {
    let c = s.client().await?;
    let n = c
        .execute(
            "UPDATE pair_slots SET state = 'joined', join_hash = $1, hello = $2
             WHERE number = $3 AND state = 'open' AND expires_at > $4",
            &[&&join_hash[..], &hello, &i64::from(number), &now],
        )
        .await?;
    if n == 1 {
        return Ok(());
    }
    let exists = c
        .query_opt(
            "SELECT 1 FROM pair_slots WHERE number = $1 AND expires_at > $2",
            &[&i64::from(number), &now],
        )
        .await?;
    Err(match exists {
        Some(_) => StoreError::PairTaken,
        None => StoreError::NotFound,
    })
}

pub(super) async fn advance(
    s: &PgStore,
    number: u32,
    from: PairState,
    to: PairState,
    reply: Option<Vec<u8>>,
    now: i64,
) -> StoreResult<bool> {
    let c = s.client().await?;
    let n = if clears_messages(to) {
        c.execute(
            "UPDATE pair_slots SET state = $1, offer = NULL, hello = NULL, reply = NULL
             WHERE number = $2 AND state = $3 AND expires_at > $4",
            &[&state_name(to), &i64::from(number), &state_name(from), &now],
        )
        .await?
    } else {
        c.execute(
            "UPDATE pair_slots SET state = $1, reply = COALESCE($2, reply)
             WHERE number = $3 AND state = $4 AND expires_at > $5",
            &[
                &state_name(to),
                &reply,
                &i64::from(number),
                &state_name(from),
                &now,
            ],
        )
        .await?
    };
    Ok(n == 1)
}
