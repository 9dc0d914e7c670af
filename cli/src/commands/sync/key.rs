//! `evi sync key export|import`: the identity wrapped with a passphrase as a
//! standard age (scrypt) file, so the `age` command can open it too.
//!
//! Import never overwrites a usable key; a damaged one (unreadable as an age
//! identity) is moved aside to `sync/identity.damaged.txt` first.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use age::secrecy::SecretString;
use clap::{Args, Subcommand};

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::sync_error;
use crate::fsutil::write_new_file;
use crate::sync::state::SyncPaths;
use crate::sync::{Identity, IdentityError};

/// The passphrase for scripts (else a prompt).
const PASSPHRASE_ENV: &str = "EVI_KEY_PASSPHRASE";

#[derive(Debug, Subcommand)]
#[command(
    after_help = "The passphrase comes from EVI_KEY_PASSPHRASE, else a prompt; a new one (export) \
                  needs at least 8 characters."
)]
pub enum KeyCommand {
    /// Write the key, protected by a passphrase (EVI_KEY_PASSPHRASE or a prompt), to a file or stdout.
    ///
    /// The passphrase comes from EVI_KEY_PASSPHRASE, else a prompt (asked
    /// twice); it needs at least 8 characters. The file is a standard age file:
    /// `age -d` opens it too.
    Export(ExportArgs),
    /// Store an exported key on this device (its passphrase from EVI_KEY_PASSPHRASE or a prompt).
    ///
    /// The passphrase comes from EVI_KEY_PASSPHRASE, else a prompt. A key
    /// already here is never overwritten (a damaged one is moved aside to
    /// sync/identity.damaged.txt).
    Import(ImportArgs),
    /// Make a new key for the account and seal everything on the server again under it.
    ///
    /// For a lost or stolen device: `--revoke NAME` revokes it in the same
    /// step. Every other device is told to pair again (`evi sync pair` on
    /// this one, `evi sync join CODE` there). Resumable: after a kill, run
    /// it again.
    Rotate(super::rotate::RotateArgs),
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
        KeyCommand::Rotate(a) => super::rotate::cmd_key_rotate(ctx, a),
    }
}

/// What an empty passphrase is refused with: it would leave the key
/// unprotected.
const EMPTY_PASSPHRASE: &str =
    "the key passphrase must not be empty: an empty one would leave the key unprotected";

/// Fewest characters a new passphrase may have. Whoever gets the exported
/// file can try passphrases against it offline, as fast as they have
/// machines for age's scrypt: a few characters are guessed in days.
pub const MIN_PASSPHRASE_CHARS: usize = 8;

/// Why a passphrase chosen for an export is refused, if it is.
fn too_short(p: &str) -> Option<String> {
    let n = p.chars().count();
    (n < MIN_PASSPHRASE_CHARS).then(|| {
        format!(
            "the key passphrase is too short ({n} character{s}; at least \
             {MIN_PASSPHRASE_CHARS}): whoever gets the exported file can guess at it offline",
            s = if n == 1 { "" } else { "s" }
        )
    })
}

/// `EVI_KEY_PASSPHRASE`, else a prompt (twice when choosing one); never
/// empty, and when choosing one (`choose`, for an export) at least
/// [`MIN_PASSPHRASE_CHARS`] long. An import takes any passphrase: the file
/// may come from an older evi that allowed shorter ones.
fn passphrase(choose: bool) -> Result<SecretString, CommandError> {
    if let Some(p) = std::env::var_os(PASSPHRASE_ENV) {
        if p.is_empty() {
            return Err(
                usage_error(format!("{EMPTY_PASSPHRASE} ({PASSPHRASE_ENV} is empty)")).hinted(
                    format!("set {PASSPHRASE_ENV} to the passphrase, or unset it to be asked"),
                ),
            );
        }
        let p = p
            .into_string()
            .map_err(|_| usage_error(format!("{PASSPHRASE_ENV} is not valid UTF-8")))?;
        if choose && let Some(why) = too_short(&p) {
            return Err(
                usage_error(format!("{why} ({PASSPHRASE_ENV})")).hinted(format!(
                    "set {PASSPHRASE_ENV} to a longer passphrase, e.g. a few random words"
                )),
            );
        }
        return Ok(p.into());
    }
    if !std::io::stdin().is_terminal() {
        return Err(usage_error("no key passphrase given").hinted(format!("set {PASSPHRASE_ENV}")));
    }
    let p = rpassword::prompt_password("key passphrase: ")?;
    if p.is_empty() {
        return Err(user_error(EMPTY_PASSPHRASE));
    }
    if choose && let Some(why) = too_short(&p) {
        return Err(user_error(why).hinted("choose a longer one, e.g. a few random words"));
    }
    if choose && rpassword::prompt_password("again: ")? != p {
        return Err(user_error("the passphrases differ"));
    }
    Ok(p.into())
}

/// A key that cannot be loaded, with what to do about it.
pub fn identity_error(e: IdentityError) -> CommandError {
    // `sync_error` hints at the key backup for a damaged identity.
    sync_error(e.into())
}

/// Where a damaged identity file is moved before a key is imported: beside
/// it, never over an earlier one.
fn damaged_path(paths: &SyncPaths) -> PathBuf {
    std::iter::once(paths.dir.join("identity.damaged.txt"))
        .chain((2..).map(|n| paths.dir.join(format!("identity.damaged-{n}.txt"))))
        .find(|p| !p.exists())
        .expect("some name is free")
}

fn cmd_key_export(ctx: &Ctx, args: ExportArgs) -> CommandResult {
    let paths = SyncPaths::new(&ctx.home);
    let identity = Identity::load(&paths.identity()).map_err(|e| match e {
        IdentityError::NotFound(_) => {
            sync_error(e.into()).hinted("run `evi sync init` first, or import a key")
        }
        other => identity_error(other),
    })?;
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

/// What is wrong with a file given to `key import`, and how to get a good one.
fn import_error(file: &Path, e: IdentityError) -> CommandError {
    let export = "on the device that has the key run `evi sync key export -o key.age`, \
                  and import that file";
    match e {
        IdentityError::NotAgeFile(_) => user_error(format!(
            "{} is not an exported evi key (expected an age file)",
            file.display()
        ))
        .hinted(export),
        IdentityError::NotPassphraseProtected | IdentityError::NoIdentityInside(_) => {
            user_error(format!("{}: {e}", file.display())).hinted(export)
        }
        IdentityError::WrongPassphrase => user_error(format!("{}: {e}", file.display())).hinted(
            format!("set {PASSPHRASE_ENV} to the passphrase it was exported with"),
        ),
        other => sync_error(other.into()),
    }
}

fn cmd_key_import(ctx: &Ctx, args: ImportArgs) -> CommandResult {
    let paths = SyncPaths::new(&ctx.home);
    let bytes = std::fs::read(&args.file)
        .map_err(|e| user_error(format!("cannot read {}: {e}", args.file.display())))?;
    let pass = passphrase(false)?;
    let identity = Identity::import(&bytes, &pass).map_err(|e| import_error(&args.file, e))?;
    let path = paths.identity();
    match Identity::load(&path) {
        Ok(have) if have.fingerprint() == identity.fingerprint() => {
            eprintln!("this device already has key {}", have.fingerprint());
            return Ok(());
        }
        Ok(have) => {
            return Err(user_error(format!(
                "this device already has another key ({}) in {}; it is never overwritten",
                have.fingerprint(),
                path.display()
            ))
            .hinted(format!(
                "if {} (key {}) is the right one, move the key here away first: mv {} {}",
                args.file.display(),
                identity.fingerprint(),
                path.display(),
                paths.dir.join("identity.unused.txt").display()
            ))
            .hinted(format!(
                "then run `evi sync key import {}` again",
                args.file.display()
            )));
        }
        Err(IdentityError::NotFound(_)) => {}
        Err(IdentityError::Malformed(_)) => {
            // Unusable as it is, and maybe worth a look: kept, aside.
            let aside = damaged_path(&paths);
            std::fs::rename(&path, &aside).map_err(|e| {
                user_error(format!(
                    "cannot move the damaged {} aside: {e}",
                    path.display()
                ))
            })?;
            eprintln!(
                "moved the damaged key file {} to {}",
                path.display(),
                aside.display()
            );
        }
        Err(other) => return Err(sync_error(other.into())),
    }
    identity.save_new(&path).map_err(|e| sync_error(e.into()))?;
    eprintln!(
        "key {} imported; now run `evi sync login`",
        identity.fingerprint()
    );
    Ok(())
}
