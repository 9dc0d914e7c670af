//! `evi sync key rotate [--revoke NAME…] [--yes] [--json]`: a new key for
//! the account, everything on the server sealed again under it, and the
//! devices named revoked in the same step (see
//! [`crate::sync::engine::rotate`] for what it promises after a kill).

use clap::Args;
use serde_json::json;

use super::Ctx;
use super::devices::find_device;
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::{client_error, confirm, open_sync, pairing_steps, sync_error};
use crate::sync::engine::rotate::{self, RotateError};

#[derive(Debug, Args)]
pub struct RotateArgs {
    /// Devices to revoke in the same step (name, id, or id prefix): a lost
    /// or stolen one. Every other device must pair again too.
    #[arg(long, num_args = 1..)]
    pub revoke: Vec<String>,
    /// Do not ask for confirmation (scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

fn rotate_error(e: RotateError) -> CommandError {
    let again = "run `evi sync key rotate` again: it goes on from where it stopped, and \
                 until it finishes the account stays as it was";
    match e {
        RotateError::Sync(s) => sync_error(s),
        RotateError::Foreign => user_error(RotateError::Foreign).hinted(format!(
            "pair this device again from the device that rotated ({})",
            pairing_steps("there", "here", "URL")
        )),
        RotateError::Abandoned => user_error(RotateError::Abandoned).hinted(
            "if another device is rotating, let it finish, then pair this one again; otherwise \
             run `evi sync key rotate` again here to begin anew (which abandons any other's)",
        ),
        RotateError::OlderServer => user_error(RotateError::OlderServer).hinted(
            "upgrade evi-server (a newer one lets any device with the current key abandon it), \
             or finish that rotation on the device that began it",
        ),
        e => user_error(e).hinted(again),
    }
}

fn confirm_rotate(yes: bool, user: &str, revoke: &[String]) -> Result<bool, CommandError> {
    let what = format!(
        "this makes a new key for {user}, seals everything the server holds again under it, \
         {}and every other device must then pair again (`evi sync pair` here, `evi sync join` \
         there)",
        if revoke.is_empty() {
            String::new()
        } else {
            format!("revokes {}, ", revoke.join(", "))
        }
    );
    confirm(yes, &what, "Rotate?", "rotate anyway")
}

pub fn cmd_key_rotate(ctx: &Ctx, args: RotateArgs) -> CommandResult {
    let mut sync = open_sync(ctx)?;
    let list = sync.client.devices().map_err(client_error)?;
    let mut ids = Vec::new();
    let mut names = Vec::new();
    for wanted in &args.revoke {
        let d = find_device(&list.devices, wanted)?;
        if d.current {
            return Err(usage_error(format!(
                "{} ({}) is this device: the rotating device keeps the new key",
                d.name, d.id
            )));
        }
        ids.push(d.id.clone());
        names.push(d.name.clone());
    }
    if !confirm_rotate(args.yes, &sync.account.user, &names)? {
        eprintln!("nothing changed");
        return Ok(());
    }
    if !args.json {
        eprintln!("sealing everything the server holds under a new key…");
    }
    let done = rotate::rotate(&mut sync, ids).map_err(rotate_error)?;
    if args.json {
        println!(
            "{}",
            json!({"outcome": "rotated", "generation": done.generation, "records": done.records,
                   "blobs": done.blobs, "blobs_missing": done.blobs_missing,
                   "revoked": done.revoked, "key_fingerprint": done.fingerprint,
                   "resumed": done.resumed, "abandoned": done.abandoned,
                   "abandoned_by": done.abandoned_by})
        );
    } else {
        if done.abandoned {
            eprintln!(
                "abandoned the unfinished key rotation {} began",
                done.abandoned_by.as_deref().unwrap_or("another device")
            );
        }
        println!(
            "rotated: key generation {} (key {}); {} records and {} blobs sealed again{}",
            done.generation,
            done.fingerprint,
            done.records,
            done.blobs,
            if done.revoked.is_empty() {
                String::new()
            } else {
                format!("; revoked {}", names.join(", "))
            }
        );
        println!(
            "every other device must pair again: run {}",
            pairing_steps("here", "there", &sync.account.server)
        );
    }
    Ok(())
}
