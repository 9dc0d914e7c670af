//! What a store does when a session is forgotten (the record kinds are in
//! [`evi_shared::forget`]).
//!
//! # Promises
//!
//! - A `forget` record is stored like any record, and in the same
//!   transaction every other record of its stream and of its group (the
//!   records pushed with that stream as their `group`: a Claude Code
//!   session's subagent transcripts, see [`evi_shared::forget`]), of kinds
//!   other than `forget` and `unforget`, is deleted with its known entry
//!   ids and damaged mark, the account's counters are lowered by what they
//!   cost, and the stream is marked forgotten. What stays of the stream is
//!   its keyed id and its tombstones.
//! - While a stream is forgotten, a push's records of it, or of its group,
//!   are refused (their index in [`super::PushOutcome::forgotten`]),
//!   decided inside the push's transaction, so no record of an old copy
//!   commits after the forget whatever the interleaving, whichever device
//!   wrote it and whether or not the forgetting device knew of it. An
//!   `unforget` record lifts the mark; records after it are taken again.
//! - The packs that held the deleted bodies are listed, in that same
//!   transaction, for [`crate::bodies::compact`] to rewrite without them: a
//!   crash at any point leaves the list, and the next start resumes it.
//!
//! The SQLite side is `sqlite/forget.rs`, the Postgres side
//! `postgres/forget.rs`; both follow [`takes`].

use evi_shared::forget::is_forget_kind;

/// Whether a push stores a record of `kind` for a stream that is
/// (`forgotten`) or is not forgotten: forgets and undos always, content
/// only while the stream is not forgotten.
pub fn takes(kind: &str, forgotten: bool) -> bool {
    is_forget_kind(kind) || !forgotten
}

/// What deleting a forgotten stream's records took off the account.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Purged {
    pub records: i64,
    pub entries: i64,
    /// Quota bytes, as [`super::record_cost`] counted them when stored.
    pub bytes: i64,
    /// Whether packs were listed for compaction.
    pub packs: bool,
    /// The known ids deleted (`entries` of them): no longer held, for the
    /// rest of the push (see [`super::push_plan`]).
    pub unheld: Vec<super::push_plan::EntryKey>,
}

impl std::ops::AddAssign for Purged {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.entries += o.entries;
        self.bytes += o.bytes;
        self.packs |= o.packs;
        self.unheld.extend(o.unheld);
    }
}

#[cfg(test)]
mod tests {
    use super::takes;

    #[test]
    fn a_forgotten_stream_takes_only_forgets_and_undos() {
        assert!(takes("entries", false));
        assert!(!takes("entries", true));
        assert!(takes("forget", true));
        assert!(takes("unforget", true));
        assert!(takes("forget", false));
    }
}
