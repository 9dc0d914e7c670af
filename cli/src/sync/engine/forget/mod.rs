//! Forgetting a session everywhere (`evi sessions forget`), and its undo.
//!
//! # Promises
//!
//! - A forget moves the session's files here into the trash
//!   ([`trash`], kept 7 days) and sends a tombstone ([`tombstone`]: sealed
//!   to the identity, MAC-bound to the session's stream) as a record of
//!   that stream. Made offline, it waits in `sync/forget.json`
//!   ([`ledger`]) and goes up first with the next push.
//! - Every other device applies it when its pull reaches it (`evi sync
//!   watch` pulls as soon as the server says a record came): the files
//!   move into its trash. Records of the session that come after the
//!   tombstone are passed over, except after an undo.
//! - The server deletes the stream's other records once the tombstone
//!   commits, and refuses later pushes of them: a device that was away
//!   (or whose eVi went on writing) is told its copy is forgotten, applies
//!   the tombstone, and never uploads the copy again.
//! - **A new life, only for what the user wrote after the forget.** When
//!   a device applies a tombstone (pulled, or learned from a refused push),
//!   the lines of the session's files that were never pushed from here
//!   (past what the push state covers) and whose `ts` is later than the
//!   time the forget was asked for are kept, as a new session
//!   `<id>-after-forget` in the same day folders; everything else goes to
//!   the trash. So lines someone typed on a laptop that was offline when
//!   the session was forgotten elsewhere survive, while the copy of the
//!   forgotten history does not come back. A line without a readable `ts`
//!   counts as before the forget. The device that forgets keeps nothing:
//!   the user asked there and then.
//! - An undo (`forget --undo`) brings the newest trash folder back, sends
//!   an `unforget` record that every device follows (bringing back its own
//!   trash), and pushes the session again, so the server holds it again
//!   (what another device sends too is dropped by entry id).
//!
//! - Sessions of other agents (Claude Code, Codex) are forgotten the same
//!   way, one stream per file ([`agent`]): each device moves its own copy,
//!   where it keeps it, into its trash, and an undo puts it back there.
//!
//! What it cannot do: a device that never syncs again keeps its copy, and
//! so does any export or backup made before; an agent's own records of a
//! session outside its session file (Codex's thread index) are left to it.

pub mod agent;
pub mod apply;
pub mod ledger;
pub mod local;
pub mod tombstone;
pub mod trash;

pub use apply::{Applied, drop_forgotten, runs};
pub use ledger::Ledger;
pub use tombstone::{Action, Tombstone};
