//! `evi link ID [--open]`: the `evi://session/ID` deep link of a session
//! (its full id, whatever prefix was typed), handed to the desktop on ask.

use std::io::Write;

use clap::Args;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, resolve, scan, stdout};
use crate::deeplink::session_link;

#[derive(Debug, Args)]
pub struct LinkArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Also hand the link to the desktop (`xdg-open`, or `open` on macOS).
    #[arg(long)]
    pub open: bool,
}

pub fn cmd_link(ctx: &Ctx, args: LinkArgs) -> CommandResult {
    let catalog = scan(ctx)?;
    let (id, _) = resolve(&catalog, &args.id)?;
    let link = session_link(&id);
    let mut out = stdout();
    writeln!(out, "{link}")?;
    finish(out)?;
    if args.open {
        crate::desktop::open(&link).map_err(|e| {
            user_error(e)
                .hinted("the link is printed above: open it on a desktop where eVi is installed")
        })?;
    }
    Ok(())
}
