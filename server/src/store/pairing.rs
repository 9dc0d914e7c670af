//! What the store keeps of a pairing slot (see [`crate::routes::pairing`]):
//! opaque bytes the two devices relay through the server, and the step the
//! slot is at. Both backends keep slots as database rows, so a creator and
//! a joiner that reach different replicas meet in one row.
//!
//! Every step is one compare-and-set on the slot's state, and the messages
//! a step no longer needs go with it: a slot holds at most one message at
//! a time, and a finished one none.

use evi_shared::api::PairState;
use evi_shared::limits::PAIR_SLOT_MAX;

use super::{StoreError, StoreResult, UserId};

/// A slot to open: the creator's account and device, its first PAKE
/// message, and its lifetime (Unix seconds).
#[derive(Debug, Clone)]
pub struct NewPairSlot {
    pub user: UserId,
    pub device_id: String,
    pub offer: Vec<u8>,
    pub now: i64,
    pub expires_at: i64,
}

/// A live (unexpired) slot as the store holds it.
#[derive(Debug, Clone)]
pub struct PairSlot {
    pub number: u32,
    pub user: UserId,
    pub device_id: String,
    pub state: PairState,
    pub offer: Option<Vec<u8>>,
    pub hello: Option<Vec<u8>>,
    pub reply: Option<Vec<u8>>,
    /// SHA-256 of the joiner's secret, once a device joined.
    pub join_hash: Option<[u8; 32]>,
    pub expires_at: i64,
}

/// One step of a slot: to `to`, with the joiner's secret hash (the join)
/// and the message of the step (the hello of `joined`, the reply of
/// `replied`).
#[derive(Debug, Clone)]
pub struct PairStep {
    pub to: PairState,
    pub join_hash: Option<[u8; 32]>,
    pub message: Option<Vec<u8>>,
}

/// A slot's message columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    pub offer: Option<Vec<u8>>,
    pub hello: Option<Vec<u8>>,
    pub reply: Option<Vec<u8>>,
}

impl PairStep {
    /// The columns after the step. The offer is done with once anyone
    /// joined; each later step keeps only its own message.
    pub fn messages(&self) -> Messages {
        let m = self.message.clone();
        match self.to {
            PairState::Joined => Messages {
                hello: m,
                ..Messages::default()
            },
            PairState::Replied => Messages {
                reply: m,
                ..Messages::default()
            },
            _ => Messages::default(),
        }
    }
}

/// A state as its column holds it.
pub fn state_name(s: PairState) -> &'static str {
    match s {
        PairState::Open => "open",
        PairState::Joined => "joined",
        PairState::Replied => "replied",
        PairState::Done => "done",
        PairState::Closed => "closed",
    }
}

/// A state column read back.
pub fn parse_state(s: &str) -> StoreResult<PairState> {
    Ok(match s {
        "open" => PairState::Open,
        "joined" => PairState::Joined,
        "replied" => PairState::Replied,
        "done" => PairState::Done,
        "closed" => PairState::Closed,
        other => {
            return Err(StoreError::Backend(format!(
                "pairing slot in unknown state {other:?}"
            )));
        }
    })
}

/// A 32-byte hash column read back.
pub fn hash_column(v: Option<Vec<u8>>) -> StoreResult<Option<[u8; 32]>> {
    v.map(|b| {
        <[u8; 32]>::try_from(b.as_slice())
            .map_err(|_| StoreError::Backend("pairing secret hash is not 32 bytes".into()))
    })
    .transpose()
}

/// What a slot's `minted_at` and `minted_device` columns say about minting
/// again ([`super::Store::pair_mint`]): `Some(None)` it made no device
/// yet, `Some(Some(id))` it made `id`, which the new device replaces;
/// `None` refused, for a slot a server before `minted_device` minted from
/// (it kept no device id, and that server refused a second device too).
pub fn minted_before(at: Option<i64>, device: Option<String>) -> Option<Option<String>> {
    match (at, device) {
        (None, _) => Some(None),
        (Some(_), Some(id)) => Some(Some(id)),
        (Some(_), None) => None,
    }
}

/// The lowest number from 1 that `taken` (ascending) does not hold, so
/// codes stay short however long the server runs; `NoFreeSlot` past
/// [`PAIR_SLOT_MAX`].
pub fn lowest_free(taken: impl IntoIterator<Item = u32>) -> StoreResult<u32> {
    let mut want = 1u32;
    for n in taken {
        if n == want {
            want += 1;
        } else if n > want {
            break;
        }
    }
    if want > PAIR_SLOT_MAX {
        return Err(StoreError::NoFreeSlot);
    }
    Ok(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_number_fills_gaps_first() {
        assert_eq!(lowest_free([]).unwrap(), 1);
        assert_eq!(lowest_free([1, 2, 3]).unwrap(), 4);
        assert_eq!(lowest_free([1, 3]).unwrap(), 2);
        assert_eq!(lowest_free([2, 3]).unwrap(), 1);
        assert!(matches!(
            lowest_free(1..=PAIR_SLOT_MAX),
            Err(StoreError::NoFreeSlot)
        ));
    }

    #[test]
    fn every_state_reads_back_as_written() {
        for s in [
            PairState::Open,
            PairState::Joined,
            PairState::Replied,
            PairState::Done,
            PairState::Closed,
        ] {
            assert_eq!(parse_state(state_name(s)).unwrap(), s);
        }
        assert!(parse_state("burnt").is_err());
    }

    #[test]
    fn a_step_keeps_only_its_own_message() {
        let step = |to| PairStep {
            to,
            join_hash: None,
            message: Some(vec![1]),
        };
        let only = |hello: Option<Vec<u8>>, reply: Option<Vec<u8>>| Messages {
            offer: None,
            hello,
            reply,
        };
        assert_eq!(
            step(PairState::Joined).messages(),
            only(Some(vec![1]), None)
        );
        assert_eq!(
            step(PairState::Replied).messages(),
            only(None, Some(vec![1]))
        );
        assert_eq!(step(PairState::Done).messages(), only(None, None));
        assert_eq!(step(PairState::Closed).messages(), only(None, None));
    }
}
