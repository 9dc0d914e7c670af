//! `evi sync init` and `evi sync login`: put a device on an account.
//!
//! A failed `init` writes nothing: the new key stays in memory until the
//! server created the account. `login` in a home that is set up already (its
//! token revoked, say) logs in again as the same account: a new token, the
//! same key (checked against the account's key check value first), and the
//! rest of the sync state as it was; while its token still works, login
//! changes nothing (a second device of the same home would only linger).

use std::io::{IsTerminal, Read};

use clap::Args;
use evi_shared::SessionId;
use evi_shared::api::{AuthResponse, ErrorCode, LoginRequest, RegisterRequest};

use evi_shared::limits::{PASSWORD_MAX_LEN, PASSWORD_MIN_LEN};

use super::Ctx;
use super::key::identity_error;
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::{client_error, pair_here, pairing_steps, sync_error, warn};
use crate::fsutil::replace_file;
use crate::sync::engine::journal::journal_name;
use crate::sync::remote::client::{Client, ClientError, check_server_url};
use crate::sync::state::context::lock_wait;
use crate::sync::state::lock::SyncLock;
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
    /// Server URL, e.g. http://127.0.0.1:8787 (default: the one this home
    /// syncs with, when it is set up).
    #[arg(long)]
    pub server: Option<String>,
    /// Account name (default: the one this home syncs as, when it is set up).
    #[arg(long)]
    pub user: Option<String>,
    /// This device's name (default: its name so far, else the host name).
    #[arg(long)]
    pub device: Option<String>,
    /// Read the password from stdin (else EVI_SYNC_PASSWORD, else a prompt).
    #[arg(long)]
    pub password_stdin: bool,
}

impl LoginArgs {
    /// The account to log in to: as given, the rest from the one this home
    /// syncs with.
    fn resolve(self, have: Option<&Account>) -> Result<AccountArgs, CommandError> {
        let (server, user) = match (self.server, self.user, have) {
            (Some(s), Some(u), _) => (s, u),
            (s, u, Some(a)) => (
                s.unwrap_or_else(|| a.server.clone()),
                u.unwrap_or_else(|| a.user.clone()),
            ),
            _ => {
                return Err(usage_error(
                    "this eVi home is not set up for sync yet: name the account",
                )
                .hinted("evi sync login --server URL --user NAME"));
            }
        };
        Ok(AccountArgs {
            server,
            user,
            device: self.device,
            password_stdin: self.password_stdin,
        })
    }
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
pub(super) fn device_name(arg: Option<&str>) -> Result<String, CommandError> {
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

/// Takes the lock and reads what the home is set up as (its account, if any).
pub(super) fn begin(ctx: &Ctx) -> Result<(SyncPaths, SyncLock, SyncState), CommandError> {
    let paths = SyncPaths::new(&ctx.home);
    let lock = SyncLock::acquire(&paths.lock(), lock_wait()).map_err(|e| sync_error(e.into()))?;
    let state = SyncState::load(&paths.state())?;
    Ok((paths, lock, state))
}

/// `evi sync login` in a home set up for `have`: only as the same user on
/// the same server (anything else would mix two accounts in one state).
fn check_same_account(have: &Account, args: &AccountArgs) -> Result<(), CommandError> {
    let server = args.server.trim_end_matches('/');
    // The server compares user names without regard to case.
    if have.server == server && have.user.eq_ignore_ascii_case(&args.user) {
        return Ok(());
    }
    Err(user_error(format!(
        "this eVi home syncs as {} on {} (device {}), not as {} on {}",
        have.user, have.server, have.device, args.user, server
    ))
    .hinted(format!(
        "to log this device in again: evi sync login --server {} --user {}",
        have.server, have.user
    ))
    .hinted(format!(
        "to sync with another account, use another EVI_HOME (the sync folder here holds the key \
         of {}'s account)",
        have.user
    )))
}

/// Why the key here cannot be used for the account, and how to get the
/// right one.
fn key_mismatch(paths: &SyncPaths, identity: &Identity, user: &str, server: &str) -> CommandError {
    let path = paths.identity();
    user_error(format!(
        "the key in {} (fingerprint {}) is not the key of {user}'s account on {server}",
        path.display(),
        identity.fingerprint()
    ))
    .hinted(format!(
        "move it away: mv {} {}",
        path.display(),
        paths.dir.join("identity.unused.txt").display()
    ))
    .hinted(format!(
        "then bring the account's key: {}",
        pair_here("on your first device", server, ", and log in again")
    ))
}

/// A password the server would refuse for a new account, refused here
/// before anything is sent.
fn check_new_password(pw: &str) -> Result<(), CommandError> {
    let chars = pw.chars().count();
    if chars < PASSWORD_MIN_LEN {
        return Err(user_error(format!(
            "the password is too short: evi-server needs at least {PASSWORD_MIN_LEN} characters"
        ))
        .hinted("choose a longer one (EVI_SYNC_PASSWORD, --password-stdin or the prompt)"));
    }
    if chars > PASSWORD_MAX_LEN {
        return Err(user_error(format!(
            "the password is too long: evi-server takes at most {PASSWORD_MAX_LEN} characters"
        )));
    }
    Ok(())
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
        warn(&format!(
            "the server named this device {given:?}, which is not usable; keeping {asked}"
        ));
        return asked.to_owned();
    }
    given.to_owned()
}

/// The account after logging in as `auth`. A home that synced before (it
/// logs in again) stays what it was to other devices: its journal keeps its
/// name, and what its earlier device ids pushed stays its own.
fn account_after(
    earlier: Option<&Account>,
    server: &str,
    device: &str,
    auth: &AuthResponse,
) -> Account {
    let mut account = Account {
        server: server.to_owned(),
        user: auth.user.clone(),
        device: device.to_owned(),
        device_id: auth.device_id.clone(),
        ..Account::default()
    };
    if let Some(old) = earlier {
        account.journal = Some(journal_name(old));
        account.earlier_device_ids = old.earlier_device_ids.clone();
        if old.device_id != auth.device_id && !account.is_own_device(&old.device_id) {
            account.earlier_device_ids.push(old.device_id.clone());
        }
    }
    account
}

/// Stores the account and the token under the name the server gave the
/// device (told on stderr when it is not the one asked for): the device is
/// set up. Everything else in `state` (the cursor, how far each file was
/// pushed) is kept. Returns that name.
pub(super) fn finish(
    paths: &SyncPaths,
    mut state: SyncState,
    server: &str,
    asked: &str,
    auth: AuthResponse,
) -> Result<String, CommandError> {
    let device = given_name(asked, &auth);
    state.account = Some(account_after(
        state.account.as_ref(),
        server,
        &device,
        &auth,
    ));
    // The state first: killed between the two, the home holds the old token,
    // and logging in again mends it.
    state.save(&paths.state())?;
    replace_file(&paths.token(), auth.token.as_bytes())?;
    if device != asked {
        eprintln!(
            "note: another device of {} is already called {asked}; this one is {device}",
            auth.user
        );
    }
    Ok(device)
}

/// A client that authenticates as the device `auth` names.
fn authed(server: &str, auth: &AuthResponse) -> Result<Client, CommandError> {
    Client::new(server, Some(auth.token.clone())).map_err(client_error)
}

/// Whether the server still takes this home's token and the key matches
/// the account's, proof included: logging in again would only make a
/// second device. A proof another key set (see `seal::keys`) is what a
/// login, with the password, replaces.
fn still_logged_in(paths: &SyncPaths, have: &Account, keys: &SyncKeys) -> bool {
    let Ok(token) = std::fs::read_to_string(paths.token()) else {
        return false;
    };
    let Ok(client) = Client::new(&have.server, Some(token.trim().to_owned())) else {
        return false;
    };
    client
        .key_check()
        .is_ok_and(|kcv| kcv.is_none_or(|k| keys.matches_key_check(&k)))
        && !matches!(
            client.set_key_check(keys, None),
            Err(ClientError::Api {
                code: ErrorCode::KeyProofMismatch,
                ..
            })
        )
}

/// The key in this home, with what to do when it is damaged.
pub(super) fn load_identity(paths: &SyncPaths) -> Result<Identity, CommandError> {
    Identity::load(&paths.identity()).map_err(identity_error)
}

pub fn cmd_sync_init(ctx: &Ctx, args: InitArgs) -> CommandResult {
    // A usage error before the lock, the key or a password prompt.
    check_server_url(&args.account.server).map_err(client_error)?;
    let (paths, _lock, state) = begin(ctx)?;
    if let Some(a) = &state.account {
        return Err(user_error(format!(
            "this eVi home already syncs as {} on {} (device {})",
            a.user, a.server, a.device
        ))
        .hinted(format!(
            "to log this device in again (after a revoke, say): evi sync login --server {} --user {}",
            a.server, a.user
        ))
        .hinted("to create another account, use another EVI_HOME"));
    }
    let device = device_name(args.account.device.as_deref())?;
    // A new key lives in memory until the account exists: a failed init
    // leaves no key behind that a later `key import` or `login` trips on.
    let existing = paths.identity().exists();
    let identity = if existing {
        eprintln!("using the existing identity {}", paths.identity().display());
        load_identity(&paths)?
    } else {
        Identity::generate()
    };
    let keys = SyncKeys::derive(&identity);
    let pw = password(&args.account, true)?;
    check_new_password(&pw)?;
    let nothing_kept =
        "nothing was written on this device: run `evi sync init` again once that is fixed";
    let client = Client::new(&args.account.server, None)
        .map_err(|e| client_error(e).hinted(nothing_kept))?;
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
                args.account.user,
                client.server()
            ))
            .hinted(format!(
                "to add this device to it: {}",
                pair_here(
                    "on your first device",
                    client.server(),
                    &format!(
                        ", then `evi sync login --server {} --user {}`",
                        client.server(),
                        args.account.user
                    )
                )
            ))
            .hinted("to create a new account, choose another --user"),
            _ => client_error(e).hinted(nothing_kept),
        })?;
    if !existing {
        identity
            .save_new(&paths.identity())
            .map_err(|e| sync_error(e.into()))?;
    }
    authed(client.server(), &auth)?
        .set_key_check(&keys, None)
        .map_err(|e| {
            client_error(e).hinted(format!(
                "the account exists and its key is in {}: finish with `evi sync login --server {} \
                 --user {}`",
                paths.identity().display(),
                client.server(),
                args.account.user
            ))
        })?;
    let device = finish(&paths, SyncState::default(), client.server(), &device, auth)?;
    println!(
        "sync set up: {} on {} as device {device}\nkey fingerprint {}\n\
         add another device: {}; back up your key: evi sync key export -o key.age",
        args.account.user,
        client.server(),
        identity.fingerprint(),
        pairing_steps("here", "there", client.server())
    );
    Ok(())
}

pub fn cmd_sync_login(ctx: &Ctx, login: LoginArgs) -> CommandResult {
    // A usage error before the lock, the key or a password prompt.
    if let Some(server) = &login.server {
        check_server_url(server).map_err(client_error)?;
    }
    let (paths, _lock, state) = begin(ctx)?;
    // Set up already (its token revoked, say): log in again as the same
    // account, keeping the key and what was synced.
    let again = state.account.clone();
    let args = login.resolve(again.as_ref())?;
    if let Some(have) = &again {
        check_same_account(have, &args)?;
    }
    let asked = args
        .device
        .as_deref()
        .or(again.as_ref().map(|a| a.device.as_str()));
    let device = device_name(asked)?;
    if !paths.identity().exists() {
        return Err(
            user_error("this device has no sync key yet").hinted(format!(
                "pair this device instead: {}",
                pair_here("on a device that has the key", &args.server, "")
            )),
        );
    }
    let identity = load_identity(&paths)?;
    let keys = SyncKeys::derive(&identity);
    if let Some(have) = &again
        && still_logged_in(&paths, have, &keys)
    {
        println!(
            "already logged in: {} on {} as device {} (key {}); nothing to do",
            have.user,
            have.server,
            have.device,
            identity.fingerprint()
        );
        return Ok(());
    }
    let pw = zeroize::Zeroizing::new(password(&args, false)?);
    let client = Client::new(&args.server, None).map_err(client_error)?;
    let auth = client
        .login(&LoginRequest {
            user: args.user.clone(),
            password: pw.to_string(),
            device: device.clone(),
        })
        .map_err(client_error)?;
    let authed = authed(client.server(), &auth)?;
    match authed.key_check().map_err(client_error)? {
        Some(kcv) if !keys.matches_key_check(&kcv) => {
            // Leave no usable token behind for a device that cannot sync.
            let _ = authed.revoke(&auth.device_id);
            return Err(key_mismatch(&paths, &identity, &args.user, client.server()));
        }
        // This device holds the account's key: its proof goes up, in place
        // of one another key set (a stolen token's, for an account from
        // before proofs) since the password came with it.
        _ => match authed.set_key_check(&keys, None) {
            Err(ClientError::Api {
                code: ErrorCode::KeyProofMismatch,
                ..
            }) => authed
                .set_key_check(&keys, Some(&pw))
                .map_err(client_error)?,
            r => r.map_err(client_error)?,
        },
    }
    let state = if again.is_some() {
        state
    } else {
        SyncState::default()
    };
    let device = finish(&paths, state, client.server(), &device, auth)?;
    match &again {
        Some(old) => {
            // The old token is done with; if the server still takes it, it
            // would only linger in `evi sync devices`.
            let _ = authed.revoke(&old.device_id);
            println!(
                "logged in again: {} on {} as device {device} (key {}); what this device synced \
                 before is kept",
                args.user,
                client.server(),
                identity.fingerprint()
            );
        }
        None => println!(
            "logged in: {} on {} as device {device} (key {})",
            args.user,
            client.server(),
            identity.fingerprint()
        ),
    }
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
