//! The engine: what moves between this device and the server, and what it
//! does to the transcripts here. It reads and writes the device's state
//! ([`super::state`]), seals and opens with [`super::seal`] and talks to the
//! server through [`super::remote`]; it never prints (it reports through the
//! [`Progress`](super::progress::Progress) the face hands in, and
//! [`notice`](super::notice)).
//!
//! - [`push`]: find what is new, seal it, upload it ([`uploader`] batches
//!   it; [`journal`] is the checkpoint journal's side, [`line_blobs`] the
//!   lines too large for a segment; [`push_report`] what push says it did).
//! - [`pull`]: fetch the records, open them, apply them ([`apply`],
//!   [`incoming`], [`pending`] for entries that cannot be written yet,
//!   [`waiting`] what waits and why, for people).
//! - [`one_session`]: one session fetched alone.
//! - [`blobs`]: which checkpoint blobs a push or pull moves.
//! - [`cores`]: the independent parts of a sync spread over the cores.
//! - [`redact`]: secrets replaced before a line is sealed.
//! - [`forget`]: sessions forgotten on every device (tombstones, the
//!   trash, undo), applied by push and pull.
//! - [`verify`]: everything the server holds checked, and repaired.
//! - [`watch`]: push and pull as things change.

pub mod apply;
pub mod blobs;
pub mod checkpoint_forget;
pub(crate) mod cores;
pub mod forget;
pub(crate) mod gather;
pub mod id_set;
pub mod incoming;
pub mod journal;
pub mod line_blobs;
pub mod one_session;
pub mod pending;
pub mod pull;
pub mod push;
pub mod push_report;
pub mod redact;
pub mod rotate;
pub(crate) mod unfinished;
pub mod uploader;
pub mod verify;
pub mod waiting;
pub mod watch;
