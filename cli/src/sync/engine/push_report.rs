//! What a push did ([`PushReport`]) and the states it records once the
//! server holds everything before them ([`Mark`]): the two things push, the
//! journal push and the uploader hand each other. Their own file, so none
//! of the three imports another for them.

use crate::source::project::ProjectRecord;
use crate::sync::engine::redact::record::Redaction;
use crate::sync::state::{FileState, JournalState};

/// What a push did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PushReport {
    pub entries: u64,
    pub sessions: u64,
    pub segments_stored: u64,
    pub segments_dropped: u64,
    pub journal_lines: u64,
    pub blobs_uploaded: u64,
    /// Blobs that could not be sent (each named in a warning; retried).
    pub blobs_failed: u64,
    pub bytes_sent: u64,
    pub files_read: u64,
    /// Lines too large for a segment, sent as blobs.
    pub line_blobs: u64,
    /// What could not be sent, one message per item; everything else was.
    pub failed: Vec<String>,
    /// Requests sent again after a transient failure (a lost connection,
    /// an answer cut short, a 5xx, a rate limit).
    pub retries: u64,
    /// Secrets replaced with `[REDACTED:<rule>]` before sealing, by rule
    /// (see [`crate::sync::engine::redact`]).
    pub redactions: std::collections::BTreeMap<String, u64>,
    /// Lines that held them.
    pub redacted_lines: u64,
    /// Sessions the server refused as forgotten on another device: their
    /// tombstone was applied here instead (see [`crate::sync::engine::forget`]).
    pub forgotten: Vec<String>,
    /// What applying tombstones did here (forgets sent, refused sessions
    /// moved to the trash, lines kept as a new session).
    pub forget: crate::sync::engine::forget::Applied,
    /// What checkpoint forgets did (`keep_days`, tombstones sent).
    pub checkpoint_forget: crate::sync::engine::checkpoint_forget::Done,
    /// What people should know of other agents' entries that waited and
    /// went in first (a Codex index left alone, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agent_notes: Vec<String>,
    /// Where, for the device's record (saved even when the push fails).
    #[serde(skip)]
    pub(crate) redacted: Vec<(String, Redaction)>,
}

/// A state to record once everything before it is on the server.
pub(crate) enum Mark {
    File(String, FileState),
    Journal(JournalState),
    /// The project entry of a session ([`crate::source::project`]).
    Project(crate::source::StreamName, ProjectRecord),
}
