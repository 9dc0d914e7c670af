//! Taking a session back: the record kinds of a forget, as both sides name
//! them.
//!
//! A forget is a record of the session's own stream whose kind is
//! [`FORGET_KIND`]; its body is an age file sealed and MAC-bound by the
//! client like any segment (the server cannot read or forge it). Once one
//! commits, the server deletes every other record of that stream (bodies
//! and metadata), keeps the stream id and the tombstone, and answers later
//! pushes to the stream with the segment's index in
//! [`crate::api::PushResponse::forgotten`] instead of storing them. A record
//! of kind [`UNFORGET_KIND`] (an undo) lifts that: the stream takes records
//! again, and the devices that still hold the session in their trash bring
//! it back.
//!
//! The kinds are visible to the server on purpose: it must know when to
//! delete, and it learns nothing it could not see anyway (a stream's
//! records disappearing).
//!
//! # Groups: a session of several streams
//!
//! A Claude Code session is one stream for its file and one per subagent
//! transcript beside it, and a device that forgets it may never have seen
//! some of them (written on another device, or offline, later). So a
//! segment of such a stream carries, in the clear, a `group`: the keyed
//! stream id of its session
//! ([`crate::frames::SegmentHead::group`], [`crate::api::Segment::group`]).
//! A forget of a stream deletes the records of its group with its own, and
//! while it stands the server refuses records whose stream *or* group is
//! forgotten; an undo lifts both. The group is a keyed id like the stream's
//! (HMAC under the account's key, never a name or hash a server could
//! confirm), and it is not MAC-bound: clients never act on it (a device
//! relates a pulled record to its session by the stream name inside the
//! sealed, MAC-bound segment), so a server that moved or dropped it could
//! only delete or keep what it could delete or keep anyway. What it shows
//! the server: which streams belong to one session (their timing said as
//! much). Records an older client pushed without it, or an older server
//! stored without it, are not in the group: every device passes over them
//! when their session is forgotten, but the server keeps them.

/// Record kind of a tombstone: forget this stream everywhere.
pub const FORGET_KIND: &str = "forget";
/// Record kind of an undo of a forget.
pub const UNFORGET_KIND: &str = "unforget";

/// Whether `kind` is one of the two kinds above (records that say what
/// happens to a stream, rather than carrying its content).
pub fn is_forget_kind(kind: &str) -> bool {
    kind == FORGET_KIND || kind == UNFORGET_KIND
}

/// Whether a segment of `kind` with `refs` changes what the account holds
/// rather than adding to it (a forget, its undo, forgotten lines or
/// blobs): a push of one needs the key proof
/// ([`crate::api::KEY_PROOF_HEADER`]), not only a device token.
pub fn changes_history(kind: &str, refs: &crate::blob_refs::SegmentRefs) -> bool {
    is_forget_kind(kind) || !refs.forgets.is_empty() || !refs.forget_blobs.is_empty()
}
