//! What the store keeps of a pairing slot (see [`crate::routes::pairing`]):
//! opaque bytes the two devices relay through the server, and the state the
//! handlers move it through. Both backends keep slots in the database, so a
//! joiner and a creator that reach different replicas meet in one row.

use evi_shared::api::PairState;

use super::UserId;

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

/// A live slot as the store holds it.
#[derive(Debug, Clone)]
pub struct PairSlot {
    pub number: u32,
    pub user: UserId,
    pub device_id: String,
    pub state: PairState,
    pub offer: Option<Vec<u8>>,
    /// SHA-256 of the joiner's secret, once it joined.
    pub join_hash: Option<[u8; 32]>,
    pub hello: Option<Vec<u8>>,
    pub reply: Option<Vec<u8>>,
    pub expires_at: i64,
}

/// A state as its column holds it.
pub fn state_name(s: PairState) -> &'static str {
    match s {
        PairState::Open => "open",
        PairState::Joined => "joined",
        PairState::Replied => "replied",
        PairState::Mismatch => "mismatch",
        PairState::Declined => "declined",
        PairState::Done => "done",
    }
}

/// A state column read back; `None` for a value no server writes.
pub fn parse_state(s: &str) -> Option<PairState> {
    Some(match s {
        "open" => PairState::Open,
        "joined" => PairState::Joined,
        "replied" => PairState::Replied,
        "mismatch" => PairState::Mismatch,
        "declined" => PairState::Declined,
        "done" => PairState::Done,
        _ => return None,
    })
}

/// Whether a slot in state `s` is still under way (counts against the
/// account's open slots).
pub fn is_live(s: PairState) -> bool {
    matches!(s, PairState::Open | PairState::Joined | PairState::Replied)
}

/// The lowest slot number at least 1 that `taken` (ascending) does not
/// hold: codes stay short however long the server runs.
pub fn lowest_free(taken: impl IntoIterator<Item = u32>) -> u32 {
    let mut want = 1u32;
    for n in taken {
        if n == want {
            want += 1;
        } else if n > want {
            break;
        }
    }
    want
}

/// What a state change clears: a finished slot keeps no message, so its
/// row holds nothing of the pairing while it waits to expire.
pub fn clears_messages(to: PairState) -> bool {
    !is_live(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_number_fills_gaps_first() {
        assert_eq!(lowest_free([]), 1);
        assert_eq!(lowest_free([1, 2, 3]), 4);
        assert_eq!(lowest_free([1, 3]), 2);
        assert_eq!(lowest_free([2, 3]), 1);
    }

    #[test]
    fn every_state_reads_back_as_written() {
        for s in [
            PairState::Open,
            PairState::Joined,
            PairState::Replied,
            PairState::Mismatch,
            PairState::Declined,
            PairState::Done,
        ] {
            assert_eq!(parse_state(state_name(s)), Some(s));
        }
        assert_eq!(parse_state("burnt"), None);
    }
}
