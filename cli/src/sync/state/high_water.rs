//! High-water marks: the most this device has seen the server hold for the
//! account. A server only ever adds records and entry ids, except for a
//! forgotten session's, which it deletes when the forget commits; so its
//! newest seq never goes down, nor do its record and entry counts but
//! with a forget (a device lowers those marks when it learns of one:
//! [`HighWater::forgot`]). If they do, its history went backwards: it was
//! restored from an older backup, or it is lying. It cannot be made to show what it dropped, but
//! it cannot hide that it dropped it from a device that saw it before.
//!
//! Push and pull raise the marks from every answer they get; `evi sync
//! status` and pull compare the server's answer with them and warn. A full
//! `evi sync pull --all` takes the server's history as it now stands: it
//! lowers the marks (and the cursor) to it, which ends the warning, and
//! makes the next push send everything again (the server keeps by entry id
//! what it still has), so what the server lost comes back from the devices.
//! `evi sync watch` does the same by itself when it sees the server went
//! back ([`pull_mending`](crate::sync::engine::pull::pull_mending)); the single-session
//! fetch checks the marks too and fetches its session from the first record.

use std::fmt;

use evi_shared::api::StatusResponse;
use serde::{Deserialize, Serialize};

/// What the server has shown this device at most, in `state.json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HighWater {
    pub newest_seq: u64,
    pub records: u64,
    pub entries: u64,
}

/// The counts that went down, each as (what, seen before, now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WentBack(pub Vec<(&'static str, u64, u64)>);

impl WentBack {
    /// Only the record and entry counts went down, not the newest seq:
    /// what a forget this device has not pulled yet also does.
    pub fn counts_only(&self) -> bool {
        self.0.iter().all(|(what, _, _)| *what != "newest seq")
    }
}

impl fmt::Display for WentBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the server's history went backwards (restored from an older backup, or lying): ",
        )?;
        for (i, (what, seen, now)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{what} {now}, this device saw {seen}")?;
        }
        f.write_str(
            "; what it lost is still on the devices: run `evi sync pull --all` and then \
             `evi sync push` on each of them to send it again",
        )
    }
}

impl HighWater {
    /// Raises the marks to what `s` shows.
    pub fn observe(&mut self, s: &StatusResponse) {
        self.newest_seq = self.newest_seq.max(s.newest_seq);
        self.records = self.records.max(s.records);
        self.entries = self.entries.max(s.entries);
    }

    /// A forget was made or learned here: the server holds fewer records and
    /// entries from its commit on, so the count marks start again from the
    /// next answer (the newest seq still guards the history).
    pub fn forgot(&mut self) {
        self.records = 0;
        self.entries = 0;
    }

    /// Raises the newest seq (a push's answer, a pulled record).
    pub fn observe_seq(&mut self, seq: u64) {
        self.newest_seq = self.newest_seq.max(seq);
    }

    /// What `s` shows below the marks, if anything.
    pub fn went_back(&self, s: &StatusResponse) -> Option<WentBack> {
        let lower: Vec<_> = [
            ("newest seq", self.newest_seq, s.newest_seq),
            ("records", self.records, s.records),
            ("entry ids", self.entries, s.entries),
        ]
        .into_iter()
        .filter(|(_, seen, now)| now < seen)
        .collect();
        (!lower.is_empty()).then_some(WentBack(lower))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(newest_seq: u64, records: u64, entries: u64) -> StatusResponse {
        StatusResponse {
            newest_seq,
            records,
            entries,
            blobs: 0,
            bytes_used: 0,
            quota_bytes: None,
            pending_for_device: None,
        }
    }

    #[test]
    fn only_a_count_below_what_was_seen_is_a_step_back() {
        let mut hw = HighWater::default();
        hw.observe(&status(10, 10, 40));
        hw.observe_seq(12);
        assert_eq!(hw.went_back(&status(12, 10, 40)), None);
        assert_eq!(hw.went_back(&status(15, 14, 90)), None);
        let back = hw.went_back(&status(7, 7, 40)).unwrap();
        assert_eq!(back.0, vec![("newest seq", 12, 7), ("records", 10, 7)]);
        let text = back.to_string();
        assert!(text.contains("newest seq 7, this device saw 12"), "{text}");
        assert!(text.contains("evi sync pull --all"), "{text}");
    }
}
