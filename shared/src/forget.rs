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

/// Record kind of a tombstone: forget this stream everywhere.
pub const FORGET_KIND: &str = "forget";
/// Record kind of an undo of a forget.
pub const UNFORGET_KIND: &str = "unforget";

/// Whether `kind` is one of the two kinds above (records that say what
/// happens to a stream, rather than carrying its content).
pub fn is_forget_kind(kind: &str) -> bool {
    kind == FORGET_KIND || kind == UNFORGET_KIND
}
