//! `evi sync init` and `evi sync login`: put a device on an account.

use std::io::{IsTerminal, Read};

use clap::Args;
use evi_shared::SessionId;
use evi_shared::api::{AuthResponse, ErrorCode, LoginRequest, RegisterRequest};

use super::{Ctx, client_error, sync_error};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::fsutil::replace_file;
use crate::sync::client::Client;
use crate::sync::context::lock_wait;
use crate::sync::error::SyncError;
use crate::sync::lock::SyncLock;
use crate::sync::state::{Account, SyncPaths, SyncState};
use crate::sync::{Identity, SyncKeys};

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub account: AccountArgs,
    /// Invite code from `evi-server invite` (or EVI_SYNC_INVITE).
    #[arg(long, env = "EVI_SYNC_INVITE", hide_env_values = true)]
    pub invite: Option<String>,
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    #[command(flatten)]
    pub account: AccountArgs,
}

#[derive(Debug, Args)]
pub struct AccountArgs {
    /// Server URL, e.g. http://127.0.0.1:8787
    #[arg(long)]
    pub server: String,
    /// Account name.
    #[arg(long)]
    pub user: String,
    /// This device's name (default: the host name).
    #[arg(long)]
    pub device: Option<String>,
    /// Read the password from stdin (else EVI_SYNC_PASSWORD, else a prompt).
    #[arg(long)]
    pub password_stdin: bool,
}

/// A device name that can name a folder on other devices.
fn device_name(arg: Option<&str>) -> Result<String, CommandError> {
    let raw = match arg {
        Some(d) => d.to_owned(),
        None => std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "device".into()),
    };
    raw.parse::<SessionId>().map(|_| raw.clone()).map_err(|_| {
        usage_error(format!("device name {raw:?} is not usable"))
            .hinted("use letters, digits, '.', '_' and '-' (e.g. --device laptop)")
    })
}

/// The account password: stdin, `EVI_SYNC_PASSWORD`, or a prompt.
fn password(args: &AccountArgs, confirm: bool) -> Result<String, CommandError> {
    if args.password_stdin {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        return Ok(s.trim_end_matches(['\n', '\r']).to_owned());
    }
    if let Ok(p) = std::env::var("EVI_SYNC_PASSWORD") {
        return Ok(p);
    }
    if !std::io::stdin().is_terminal() {
        return Err(usage_error("no password given")
            .hinted("set EVI_SYNC_PASSWORD or pass --password-stdin"));
    }
    let p = rpassword::prompt_password(format!("password for {}: ", args.user))?;
    if confirm && rpassword::prompt_password("again: ")? != p {
        return Err(user_error("the passwords differ"));
    }
    Ok(p)
}

/// Checks the home is not set up yet and takes the lock.
fn begin(ctx: &Ctx) -> Result<(SyncPaths, SyncLock), CommandError> {
    let paths = SyncPaths::new(&ctx.home);
    let lock = SyncLock::acquire(&paths.lock(), lock_wait()).map_err(|e| sync_error(e.into()))?;
    let state = SyncState::load(&paths.state())?;
    if let Some(a) = state.account {
        return Err(user_error(format!(
            "this eVi home already syncs as {} on {} (device {})",
            a.user, a.server, a.device
        ))
        .hinted("use another EVI_HOME, or move the sync folder away to start over"));
    }
    Ok((paths, lock))
}

/// The name the server gave this device: the one asked for, or `NAME-2`
/// (and so on) when another live device of the account already has it. An
/// older server does not say (the asked name stands), and a name that could
/// not name a folder on other devices is not taken from any server.
fn given_name(asked: &str, auth: &AuthResponse) -> String {
    let given = auth.device_name.as_str();
    if given.is_empty() || given == asked {
        return asked.to_owned();
    }
    if given.parse::<SessionId>().is_err() {
        crate::commands::warn(&format!(
            "the server named this device {given:?}, which is not usable; keeping {asked}"
        ));
        return asked.to_owned();
    }
    given.to_owned()
}

/// Stores the token and the account under the name the server gave the
/// device (told on stderr when it is not the one asked for): the device is
/// set up. Returns that name.
fn finish(
    paths: &SyncPaths,
    server: &str,
    asked: &str,
    auth: AuthResponse,
) -> Result<String, CommandError> {
    let device = given_name(asked, &auth);
    let user = auth.user.clone();
    replace_file(&paths.token(), auth.token.as_bytes())?;
    let state = SyncState {
        account: Some(Account {
            server: server.to_owned(),
            user: auth.user,
            device: device.clone(),
            device_id: auth.device_id,
        }),
        ..SyncState::default()
    };
    state.save(&paths.state())?;
    if device != asked {
        eprintln!("note: another device of {user} is already called {asked}; this one is {device}");
    }
    Ok(device)
}

/// A client that authenticates as the device `auth` names.
fn authed(server: &str, auth: &AuthResponse) -> Result<Client, CommandError> {
    Client::new(server, Some(auth.token.clone())).map_err(client_error)
}

pub fn cmd_sync_init(ctx: &Ctx, args: InitArgs) -> CommandResult {
    let (paths, _lock) = begin(ctx)?;
    let device = device_name(args.account.device.as_deref())?;
    let identity = if paths.identity().exists() {
        eprintln!("using the existing identity {}", paths.identity().display());
        Identity::load(&paths.identity()).map_err(|e| sync_error(e.into()))?
    } else {
        Identity::create(&paths.identity()).map_err(|e| sync_error(e.into()))?
    };
    let keys = SyncKeys::derive(&identity);
    let pw = password(&args.account, true)?;
    let client = Client::new(&args.account.server, None).map_err(client_error)?;
    let auth = client
        .register(&RegisterRequest {
            user: args.account.user.clone(),
            password: pw,
            device: device.clone(),
            invite: args.invite,
        })
        .map_err(|e| match e.code() {
            Some(ErrorCode::UserExists) => user_error(format!(
                "the account {} already exists on {}",
                args.account.user, args.account.server
            ))
            .hinted("on a new device use `evi sync login` with the key imported"),
            _ => client_error(e),
        })?;
    authed(client.server(), &auth)?
        .set_key_check(&keys.key_check_value())
        .map_err(client_error)?;
    let device = finish(&paths, client.server(), &device, auth)?;
    println!(
        "sync set up: {} on {} as device {device}\nkey fingerprint {}\n\
         back up your key (and move it to other devices): evi sync key export -o key.age",
        args.account.user,
        client.server(),
        identity.fingerprint()
    );
    Ok(())
}

pub fn cmd_sync_login(ctx: &Ctx, args: LoginArgs) -> CommandResult {
    let (paths, _lock) = begin(ctx)?;
    let device = device_name(args.account.device.as_deref())?;
    if !paths.identity().exists() {
        return Err(user_error("this device has no sync key yet").hinted(
            "on a device that has it run `evi sync key export -o key.age`, copy the file here, \
             then `evi sync key import key.age`",
        ));
    }
    let identity = Identity::load(&paths.identity()).map_err(|e| sync_error(e.into()))?;
    let keys = SyncKeys::derive(&identity);
    let pw = password(&args.account, false)?;
    let client = Client::new(&args.account.server, None).map_err(client_error)?;
    let auth = client
        .login(&LoginRequest {
            user: args.account.user.clone(),
            password: pw,
            device: device.clone(),
        })
        .map_err(client_error)?;
    let authed = authed(client.server(), &auth)?;
    match authed.key_check().map_err(client_error)? {
        Some(kcv) if !keys.matches_key_check(&kcv) => {
            // Leave no usable token behind for a device that cannot sync.
            let _ = authed.revoke(&auth.device_id);
            return Err(sync_error(SyncError::KeyMismatch));
        }
        Some(_) => {}
        None => authed
            .set_key_check(&keys.key_check_value())
            .map_err(client_error)?,
    }
    let device = finish(&paths, client.server(), &device, auth)?;
    println!(
        "logged in: {} on {} as device {device} (key {})",
        args.account.user,
        client.server(),
        identity.fingerprint()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(device_name: &str) -> AuthResponse {
        AuthResponse {
            token: "t".into(),
            device_id: "d".into(),
            user: "pat".into(),
            device_name: device_name.into(),
        }
    }

    #[test]
    fn the_name_the_server_gave_wins_unless_it_is_missing_or_unusable() {
        assert_eq!(given_name("laptop", &auth("laptop")), "laptop");
        assert_eq!(given_name("laptop", &auth("laptop-2")), "laptop-2");
        // An older server does not say.
        assert_eq!(given_name("laptop", &auth("")), "laptop");
        // A name that cannot name a folder elsewhere is not taken.
        assert_eq!(given_name("laptop", &auth("../x")), "laptop");
        assert_eq!(given_name("laptop", &auth("lap top")), "laptop");
    }
}
