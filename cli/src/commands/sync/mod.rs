//! `evi sync …`: set up a device, move the key, push and pull.

mod account;
mod devices;
mod join;
mod key;
mod pair;
mod rotate;
mod service;
mod transfer;
mod verify;
mod watch;

use clap::Subcommand;

use super::Ctx;
use super::shared::tell_notices;
use crate::command_error::CommandResult;

pub use account::{InitArgs, LoginArgs};
pub use key::KeyCommand;
pub use transfer::{JsonArgs, PullArgs, StatusArgs};

#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// First device: create the key and the account.
    Init(InitArgs),
    /// Another device: join the account with the imported key.
    Login(LoginArgs),
    /// On a device that syncs: print a short code and add the device that
    /// joins with it (`evi sync join`).
    Pair(pair::PairArgs),
    /// A new device: set up from a device running `evi sync pair`, with its
    /// code (no password, no key file).
    Join(join::JoinArgs),
    /// Move the key between devices (passphrase-protected; the offline way).
    #[command(subcommand)]
    Key(KeyCommand),
    /// Send new entries and blobs to the server.
    Push(JsonArgs),
    /// Fetch and apply what other devices pushed.
    Pull(PullArgs),
    /// What is set up and what is pending each way.
    Status(StatusArgs),
    /// Fetch and check everything the server holds, and this device
    /// against it (`--repair` mends what it can).
    Verify(verify::VerifyArgs),
    /// List the account's devices.
    Devices(JsonArgs),
    /// Revoke a device's token (by name or id).
    Revoke(devices::RevokeArgs),
    /// Keep syncing: push what eVi writes, pull what other devices push.
    Watch(watch::WatchArgs),
}

pub fn run(ctx: &Ctx, cmd: SyncCommand) -> CommandResult {
    tell_notices();
    match cmd {
        SyncCommand::Init(a) => account::cmd_sync_init(ctx, a),
        SyncCommand::Login(a) => account::cmd_sync_login(ctx, a),
        SyncCommand::Pair(a) => pair::cmd_sync_pair(ctx, a),
        SyncCommand::Join(a) => join::cmd_sync_join(ctx, a),
        SyncCommand::Key(k) => key::run(ctx, k),
        SyncCommand::Push(a) => transfer::cmd_sync_push(ctx, a),
        SyncCommand::Pull(a) => transfer::cmd_sync_pull(ctx, a),
        SyncCommand::Status(a) => transfer::cmd_sync_status(ctx, a),
        SyncCommand::Verify(a) => verify::cmd_sync_verify(ctx, a),
        SyncCommand::Devices(a) => devices::cmd_sync_devices(ctx, a),
        SyncCommand::Revoke(a) => devices::cmd_sync_revoke(ctx, a),
        SyncCommand::Watch(a) => watch::cmd_sync_watch(ctx, a),
    }
}
