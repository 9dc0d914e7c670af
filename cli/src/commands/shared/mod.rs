//! What every command file shares, in one module that they all import and
//! none of them owns, so command files never import each other for it:
//! output (warnings, stdout, progress), the session a command names, sync
//! and client failures as the user reads them, times, the web viewer's
//! address, the checkpoint journal `--device` names, and the one rule of
//! asking before a destructive command (`confirm`).

mod checkpoints;
mod confirm;
pub mod one_session;
mod output;
mod sessions;
mod sync;
mod time;
mod web;

pub use checkpoints::journal_of;
pub use confirm::{ask, confirm, needs_terminal};
pub use output::{finish, print_json, progress, stdout, warn, width};
pub use sessions::{agent_arg, agent_file, load, load_tree, path_map, resolve, scan};
pub use sync::{
    client_error, git_error, open_sync, pair_here, pairing_steps, require_sync, sync_error,
    sync_error_in, sync_set_up, tell_notices,
};
pub use time::{fmt_minute, fmt_rfc3339, fmt_second};
pub use web::{open_browser, web_url};
