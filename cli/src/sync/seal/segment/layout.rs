//! What sealing and opening must agree on byte for byte: the entry flags,
//! the keyed ids a segment is bound to, what the MAC covers around the
//! body, the names a journal may have, and the marker of a plaintext past
//! its limit. Both `seal.rs` and `open.rs` import this file; neither
//! imports the other.

use std::io;

use evi_shared::{KeyedId, SessionId};
use hmac::Mac;

use super::{JournalLine, MAC_DOMAIN, SegmentError, SegmentKind};
use crate::sync::seal::keys::{HmacSha256, SyncKeys};

/// Entry flag bits (format 2).
pub(super) const FLAG_PARENT: u8 = 1;
pub(super) const FLAG_LINE_BLOB: u8 = 2;

/// The keyed ids of a journal's lines in format `version`: by content from
/// format 2 on, by number in format 1. Sealing and opening both call this,
/// so the two can never disagree.
pub(super) fn journal_ids(
    keys: &SyncKeys,
    version: u8,
    name: &[u8],
    lines: &[JournalLine],
) -> (KeyedId, Vec<KeyedId>) {
    let stream = keys.keyed_raw(&[b"journal-stream", name]);
    let ids = lines
        .iter()
        .map(|l| match version {
            1 => keys.keyed_raw(&[b"journal-entry", name, &l.seq.to_be_bytes()]),
            _ => keys.keyed_raw(&[b"journal-line", name, &l.line]),
        })
        .collect();
    (stream, ids)
}

/// The keyed ids of a session's entries (the same in every format).
pub(super) fn session_ids<'a>(
    keys: &SyncKeys,
    session: &[u8],
    ids: impl Iterator<Item = &'a [u8]>,
) -> (KeyedId, Vec<KeyedId>) {
    (
        keys.keyed_raw(&[b"session", session]),
        ids.map(|id| keys.keyed_raw(&[b"entry", session, id]))
            .collect(),
    )
}

/// What the MAC covers before the body: its domain, the format version
/// and the kind.
pub(super) fn mac_prefix(mac: &mut HmacSha256, version: u8, kind: SegmentKind) {
    mac.update(&(MAC_DOMAIN.len() as u32).to_be_bytes());
    mac.update(MAC_DOMAIN);
    mac.update(&[version]);
    let name = kind.as_str().as_bytes();
    mac.update(&(name.len() as u32).to_be_bytes());
    mac.update(name);
}

/// What the MAC covers after the body: its length, the stream's keyed id
/// and every entry's, each with its length.
pub(super) fn mac_suffix(mac: &mut HmacSha256, body_len: u64, stream: &KeyedId, ids: &[KeyedId]) {
    mac.update(&body_len.to_be_bytes());
    mac.update(&64u32.to_be_bytes());
    mac.update(stream.as_str().as_bytes());
    mac.update(&(ids.len() as u32).to_be_bytes());
    for id in ids {
        mac.update(&64u32.to_be_bytes());
        mac.update(id.as_str().as_bytes());
    }
}

/// Whether `device` may name a journal stream (and so a folder).
pub fn check_device(device: &str) -> Result<(), SegmentError> {
    device
        .parse::<SessionId>()
        .map(|_| ())
        .map_err(|_| SegmentError::BadDevice(device.to_owned()))
}

/// The error a plaintext past [`MAX_PLAINTEXT_BYTES`](super::MAX_PLAINTEXT_BYTES)
/// is tagged with, on either side.
#[derive(Debug)]
pub(super) struct TooLargeMarker;
impl std::fmt::Display for TooLargeMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("plaintext size limit exceeded")
    }
}
impl std::error::Error for TooLargeMarker {}

/// Whether `e` carries the marker `T`.
pub(super) fn is_marked<T: std::error::Error + 'static>(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<T>())
}
