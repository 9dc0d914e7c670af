//! `evi sync …`: set up a device, move the key, push and pull.

mod account;
mod devices;
mod key;
mod transfer;

use clap::Subcommand;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::sync::client::{ClientError, is_unauthorized};
use crate::sync::context::SyncContext;
use crate::sync::error::SyncError;

pub use account::{InitArgs, LoginArgs};
pub use key::KeyCommand;
pub use transfer::{JsonArgs, PullArgs, StatusArgs};

#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// First device: create the key and the account.
    Init(InitArgs),
    /// Another device: join the account with the imported key.
    Login(LoginArgs),
    /// Move the key between devices (passphrase-protected).
    #[command(subcommand)]
    Key(KeyCommand),
    /// Send new entries and blobs to the server.
    Push(JsonArgs),
    /// Fetch and apply what other devices pushed.
    Pull(PullArgs),
    /// What is set up and what is pending each way.
    Status(StatusArgs),
    /// List the account's devices.
    Devices(JsonArgs),
    /// Revoke a device's token (by name or id).
    Revoke(devices::RevokeArgs),
}

pub fn run(ctx: &Ctx, cmd: SyncCommand) -> CommandResult {
    match cmd {
        SyncCommand::Init(a) => account::cmd_sync_init(ctx, a),
        SyncCommand::Login(a) => account::cmd_sync_login(ctx, a),
        SyncCommand::Key(k) => key::run(ctx, k),
        SyncCommand::Push(a) => transfer::cmd_sync_push(ctx, a),
        SyncCommand::Pull(a) => transfer::cmd_sync_pull(ctx, a),
        SyncCommand::Status(a) => transfer::cmd_sync_status(ctx, a),
        SyncCommand::Devices(a) => devices::cmd_sync_devices(ctx, a),
        SyncCommand::Revoke(a) => devices::cmd_sync_revoke(ctx, a),
    }
}

/// Opens the home's sync context (taking the lock).
pub fn open(ctx: &Ctx) -> Result<SyncContext, CommandError> {
    SyncContext::open(&ctx.home).map_err(sync_error)
}

/// A sync failure as the user reads it, with what to do.
pub fn sync_error(e: SyncError) -> CommandError {
    let hint = match &e {
        SyncError::NotSetUp => Some(
            "run `evi sync init --server URL --user NAME` on your first device, \
             or `evi sync login --server URL --user NAME` on another",
        ),
        SyncError::Client(c) if is_unauthorized(c) => {
            Some("this device's token is no longer valid (revoked?): run `evi sync login` again")
        }
        SyncError::Client(ClientError::Transport { .. }) => {
            Some("check that evi-server is running and the URL is right")
        }
        SyncError::KeyMismatch => Some(
            "import the identity of your first device: there `evi sync key export -o key.age`, \
             here `evi sync key import key.age`",
        ),
        SyncError::Segment { .. } | SyncError::Blob { .. } => Some(
            "nothing from that record was written; the server may be compromised or its data \
             damaged",
        ),
        SyncError::Lock(_) => Some("set EVI_SYNC_LOCK_WAIT=SECONDS to wait longer"),
        _ => None,
    };
    let err = user_error(e);
    match hint {
        Some(h) => err.hinted(h),
        None => err,
    }
}

pub fn client_error(e: ClientError) -> CommandError {
    sync_error(SyncError::Client(e))
}
