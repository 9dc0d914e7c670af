//! What a push that stopped before its end may have left on the server.
//!
//! A push records a file's state only once the batch holding its lines is
//! acknowledged. A push that is killed, or that fails, after the server
//! committed a batch but before the answer was recorded leaves the server
//! holding lines the state calls unsent. The next push reads them again;
//! sent in a segment beside new lines, they would be stored a second time
//! (the server keeps a segment whole when any of its ids is new). So a push
//! leaves a marker while it runs, and the push after one that left it asks
//! the server which of the ids it gathered are known before sealing, and
//! sends only the rest. The same holds for a file whose pushed part changed
//! and is read again whole.
//!
//! The marker is not fsynced: a kill leaves it in the page cache, which is
//! what matters here; a power cut that loses it costs stored bytes, never a
//! lost or doubled entry (pull applies by id).

use std::collections::HashSet;
use std::path::PathBuf;

use evi_shared::KeyedId;

use crate::sync::error::{IoContext, SyncError};
use crate::sync::state::SyncPaths;
use crate::sync::state::context::SyncContext;
use crate::sync::{Entry, JournalLine};

/// The marker of a push under way.
pub(crate) struct Unfinished {
    path: PathBuf,
    /// Whether the push before this one did not finish, and the server can
    /// say which ids it holds.
    pub careful: bool,
}

/// Leaves the marker as a push that stopped would, so the next push asks
/// the server which entries it holds before sending: for a device whose
/// push state starts over while the server holds its entries (it joined
/// again after a key rotation).
pub fn mark_unfinished(paths: &SyncPaths) -> Result<(), SyncError> {
    let path = marker(paths);
    std::fs::write(&path, b"").ctx(|| format!("cannot write the push marker {}", path.display()))
}

fn marker(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("push-unfinished")
}

impl Unfinished {
    /// Leaves the marker; `careful` if an earlier push left it already.
    pub fn begin(paths: &SyncPaths, server_answers: bool) -> Result<Self, SyncError> {
        let path = marker(paths);
        let left = path.exists();
        if !left {
            std::fs::write(&path, b"")
                .ctx(|| format!("cannot write the push marker {}", path.display()))?;
        }
        Ok(Self {
            path,
            careful: left && server_answers,
        })
    }

    /// Removes the marker once everything the push read is acknowledged.
    pub fn finish(self) -> Result<(), SyncError> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).ctx(|| format!("cannot remove the push marker {}", self.path.display()))
            }
            _ => Ok(()),
        }
    }
}

/// Removes from `entries` those the server already holds.
pub(crate) fn drop_known_entries(
    ctx: &SyncContext,
    stream: &str,
    entries: &mut Vec<Entry>,
) -> Result<(), SyncError> {
    let ids: Vec<KeyedId> = entries
        .iter()
        .map(|e| ctx.keys.stream_entry_key(stream, &e.id))
        .collect();
    let known = ctx.client.known_entries(&ids)?;
    retain_unknown(entries, &ids, &known);
    Ok(())
}

/// Removes from `lines` of the journal `name` those the server holds.
pub(crate) fn drop_known_lines(
    ctx: &SyncContext,
    name: &str,
    lines: &mut Vec<JournalLine>,
) -> Result<(), SyncError> {
    let ids: Vec<KeyedId> = lines
        .iter()
        .map(|l| ctx.keys.journal_line_key(name, &l.line))
        .collect();
    let known = ctx.client.known_entries(&ids)?;
    retain_unknown(lines, &ids, &known);
    Ok(())
}

fn retain_unknown<T>(items: &mut Vec<T>, ids: &[KeyedId], known: &HashSet<KeyedId>) {
    let mut keep = ids.iter().map(|id| !known.contains(id));
    items.retain(|_| keep.next().unwrap_or(true));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_unknown_items_stay_in_order() {
        let id = |c: u8| KeyedId::from_bytes([c; 32]);
        let ids = [id(1), id(2), id(3), id(4)];
        let known: HashSet<KeyedId> = [id(2), id(4)].into_iter().collect();
        let mut items = vec!['a', 'b', 'c', 'd'];
        retain_unknown(&mut items, &ids, &known);
        assert_eq!(items, ['a', 'c']);
    }
}
