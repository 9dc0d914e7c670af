//! `evi sync key export|import`: the identity wrapped with a passphrase as a
//! standard age (scrypt) file, so the `age` command can open it too.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use age::secrecy::SecretString;
use clap::{Args, Subcommand};

use super::{Ctx, sync_error};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::fsutil::write_new_file;
use crate::sync::Identity;
use crate::sync::state::SyncPaths;

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Write the identity, passphrase-protected, to a file or stdout.
    Export(ExportArgs),
    /// Store an exported identity on this device.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Output file (default stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A file written by `evi sync key export`.
    pub file: PathBuf,
}

pub fn run(ctx: &Ctx, cmd: KeyCommand) -> CommandResult {
    match cmd {
        KeyCommand::Export(a) => cmd_key_export(ctx, a),
        KeyCommand::Import(a) => cmd_key_import(ctx, a),
    }
}

/// `EVI_KEY_PASSPHRASE`, else a prompt (twice when choosing one).
fn passphrase(confirm: bool) -> Result<SecretString, CommandError> {
    if let Ok(p) = std::env::var("EVI_KEY_PASSPHRASE") {
        return Ok(p.into());
    }
    if !std::io::stdin().is_terminal() {
        return Err(usage_error("no key passphrase given").hinted("set EVI_KEY_PASSPHRASE"));
    }
    let p = rpassword::prompt_password("key passphrase: ")?;
    if confirm && rpassword::prompt_password("again: ")? != p {
        return Err(user_error("the passphrases differ"));
    }
    if p.is_empty() {
        return Err(user_error(
            "an empty passphrase would leave the key unprotected",
        ));
    }
    Ok(p.into())
}

fn cmd_key_export(ctx: &Ctx, args: ExportArgs) -> CommandResult {
    let paths = SyncPaths::new(&ctx.home);
    let identity = Identity::load(&paths.identity())
        .map_err(|e| sync_error(e.into()).hinted("run `evi sync init` first, or import a key"))?;
    let pass = passphrase(true)?;
    let bytes = identity.export(&pass).map_err(|e| sync_error(e.into()))?;
    match args.output {
        Some(path) => {
            write_new_file(&path, &bytes).map_err(|e| {
                user_error(format!("cannot write {}: {e}", path.display()))
                    .hinted("choose a path that does not exist yet")
            })?;
            eprintln!(
                "key {} exported to {} (keep it secret; import it with `evi sync key import`)",
                identity.fingerprint(),
                path.display()
            );
        }
        None => std::io::stdout().lock().write_all(&bytes)?,
    }
    Ok(())
}

fn cmd_key_import(ctx: &Ctx, args: ImportArgs) -> CommandResult {
    let paths = SyncPaths::new(&ctx.home);
    let bytes = std::fs::read(&args.file)
        .map_err(|e| user_error(format!("cannot read {}: {e}", args.file.display())))?;
    let pass = passphrase(false)?;
    let identity = Identity::import(&bytes, &pass).map_err(|e| sync_error(e.into()))?;
    if paths.identity().exists() {
        let have = Identity::load(&paths.identity()).map_err(|e| sync_error(e.into()))?;
        if have.fingerprint() == identity.fingerprint() {
            eprintln!("this device already has key {}", have.fingerprint());
            return Ok(());
        }
        return Err(user_error(format!(
            "this device already has another key ({}); it is never overwritten",
            have.fingerprint()
        ))
        .hinted("use another EVI_HOME, or move sync/identity.txt away yourself"));
    }
    identity
        .save_new(&paths.identity())
        .map_err(|e| sync_error(e.into()))?;
    println!(
        "key {} imported; now run `evi sync login`",
        identity.fingerprint()
    );
    Ok(())
}
