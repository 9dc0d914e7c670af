//! `evi sync devices` and `evi sync revoke`.

use std::io::Write;

use clap::Args;
use evi_shared::api::Device;

use super::Ctx;
use super::transfer::JsonArgs;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{client_error, confirm, finish, open_sync, stdout};
use crate::transcript::catalog::starts_with_ignore_case;

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// Device name, id, or unambiguous prefix of its id.
    pub device: String,
    /// Revoke this very device without asking (it then needs `evi sync login`).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

pub fn cmd_sync_devices(ctx: &Ctx, args: JsonArgs) -> CommandResult {
    let sync = open_sync(ctx)?;
    let list = sync.client.devices().map_err(client_error)?;
    let mut out = stdout();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &list).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    let w = list
        .devices
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "  {:w$}  {:26}  {:16}  {:16}  KEY",
        "NAME", "ID", "ADDED", "LAST SEEN"
    )?;
    for d in &list.devices {
        writeln!(
            out,
            "{} {:w$}  {:26}  {:16}  {:16}  {}",
            if d.current { "*" } else { " " },
            d.name,
            d.id,
            d.created_at.format("%Y-%m-%d %H:%M"),
            d.last_seen_at.format("%Y-%m-%d %H:%M"),
            key_column(d)
        )?;
    }
    finish(out)
}

/// Whether the device holds the account's current key, and which
/// generation it was last given (0: a server older than generations).
fn key_column(d: &Device) -> String {
    match (d.current_key, d.key_generation) {
        (true, 0) => "current".to_owned(),
        (true, g) => format!("current (generation {g})"),
        (false, g) => format!("old (generation {g}): must pair again"),
    }
}

pub fn cmd_sync_revoke(ctx: &Ctx, args: RevokeArgs) -> CommandResult {
    let sync = open_sync(ctx)?;
    let list = sync.client.devices().map_err(client_error)?;
    let d = find_device(&list.devices, &args.device)?;
    if d.current && !confirm_self(d, args.yes)? {
        eprintln!("nothing revoked");
        return Ok(());
    }
    sync.client.revoke(&d.id).map_err(client_error)?;
    println!(
        "revoked {} ({}){}",
        d.name,
        d.id,
        if d.current {
            "; this device can no longer sync"
        } else {
            ""
        }
    );
    Ok(())
}

/// Revoking the device it runs on cuts this home off at once (its token
/// dies with the request), so that is asked first (see `confirm`): whether
/// the user said yes.
fn confirm_self(d: &Device, yes: bool) -> Result<bool, CommandError> {
    let what = format!(
        "{} ({}) is this device: revoking it stops its sync until you run `evi sync login` \
         here again",
        d.name, d.id
    );
    confirm(yes, &what, "Revoke it?", "revoke it anyway")
}

/// The device `wanted` names: its exact id, its name, or an unambiguous
/// prefix of its id (ASCII case ignored, as for session ids).
pub(super) fn find_device<'a>(
    devices: &'a [Device],
    wanted: &str,
) -> Result<&'a Device, CommandError> {
    if let Some(d) = devices.iter().find(|d| d.id == wanted) {
        return Ok(d);
    }
    let named: Vec<_> = devices.iter().filter(|d| d.name == wanted).collect();
    match named.as_slice() {
        [d] => return Ok(d),
        [] => {}
        many => {
            let ids: Vec<&str> = many.iter().map(|d| d.id.as_str()).collect();
            return Err(user_error(format!(
                "{} devices are named {wanted:?}: {}",
                many.len(),
                ids.join(", ")
            ))
            .hinted("revoke by id"));
        }
    }
    let by_id: Vec<_> = devices
        .iter()
        .filter(|d| !wanted.is_empty() && starts_with_ignore_case(&d.id, wanted))
        .collect();
    match by_id.as_slice() {
        [d] => Ok(d),
        [] => Err(user_error(format!(
            "no device is named {wanted:?} or has an id starting with it"
        ))
        .hinted("`evi sync devices` lists them")),
        many => {
            let mut msg = format!("`{wanted}` matches {} device ids:", many.len());
            for d in many {
                msg.push_str(&format!("\n  {}  {}", d.id, d.name));
            }
            Err(user_error(msg).hinted("type more characters of the id"))
        }
    }
}
