//! `evi sync devices` and `evi sync revoke`.

use std::io::Write;

use clap::Args;

use super::transfer::JsonArgs;
use super::{Ctx, client_error, open};
use crate::command_error::{CommandResult, user_error};
use crate::commands::{finish, stdout};

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// Device name or id.
    pub device: String,
}

pub fn cmd_sync_devices(ctx: &Ctx, args: JsonArgs) -> CommandResult {
    let sync = open(ctx)?;
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
        "  {:w$}  {:26}  {:16}  LAST SEEN",
        "NAME", "ID", "ADDED"
    )?;
    for d in &list.devices {
        writeln!(
            out,
            "{} {:w$}  {:26}  {:16}  {}",
            if d.current { "*" } else { " " },
            d.name,
            d.id,
            d.created_at.format("%Y-%m-%d %H:%M"),
            d.last_seen_at.format("%Y-%m-%d %H:%M")
        )?;
    }
    finish(out)
}

pub fn cmd_sync_revoke(ctx: &Ctx, args: RevokeArgs) -> CommandResult {
    let sync = open(ctx)?;
    let list = sync.client.devices().map_err(client_error)?;
    let found: Vec<_> = list
        .devices
        .iter()
        .filter(|d| d.id == args.device || d.name == args.device)
        .collect();
    let d = match found.as_slice() {
        [d] => *d,
        [] => {
            return Err(user_error(format!("no device named {:?}", args.device))
                .hinted("`evi sync devices` lists them"));
        }
        many => {
            let ids: Vec<&str> = many.iter().map(|d| d.id.as_str()).collect();
            return Err(user_error(format!(
                "{} devices are named {:?}: {}",
                many.len(),
                args.device,
                ids.join(", ")
            ))
            .hinted("revoke by id"));
        }
    };
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
