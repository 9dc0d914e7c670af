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
//!   tombstone are passed over, except after an undo. A tombstone is known
//!   by what it says (stream, action, time, device), not only by its ids
//!   ([`ledger`]): sealed again under a new key by a rotation, it changes
//!   nothing where it was applied, so a forget undone before the rotation
//!   stays undone.
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
//! - **A session is every stream of it, known here or not.** A Claude Code
//!   session is its file's stream and one stream per subagent transcript,
//!   which other devices may write after this one last pulled, or push
//!   from offline later. Its tombstone (on the session's own stream)
//!   covers them all: each segment of a subagent's stream names its
//!   session's keyed stream id as its `group` (see [`evi_shared::forget`]),
//!   so the server deletes the group's records with the session's and
//!   refuses new ones until an undo; a device that applies the tombstone
//!   moves every subagent transcript of the session it holds into the
//!   session's trash folder, passes over pulled records of any stream of a
//!   forgotten session (also those an older evi or server stored without
//!   the group), and applies the session's tombstone when the server
//!   refuses one of its subagents' records. An undo brings every one of
//!   them back on every device that had it, and their next push sends
//!   them again. (The forget also sends a tombstone for each subagent
//!   transcript the forgetting device knows, which a server older than
//!   groups needs; the undo undoes those too.)
//!
//! What it cannot do: a device that never syncs again keeps its copy, and
//! so does any export or backup made before; an agent's own records of a
//! session outside its session file (Codex's thread index) are left to it;
//! records of a subagent transcript that an older evi pushed (or an older
//! server stored) without its group stay on the server, passed over by
//! every device.

pub mod agent;
pub mod apply;
pub mod ledger;
pub mod local;
pub mod tombstone;
pub mod trash;

pub use apply::{Applied, drop_forgotten, runs};
pub use ledger::Ledger;
pub use tombstone::{Action, Tombstone};
