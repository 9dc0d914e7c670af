//! `evi sync join CODE --server URL`: set up this device from another one
//! that runs `evi sync pair`, with no password and no key file.
//!
//! It ends as `key import` and `login` would leave it: the identity in
//! `sync/identity.txt` (0600), the token, the account in the sync state;
//! then `evi sync pull` works. Nothing is written before the other device's
//! reply checked out; a reply that cannot be installed (another key in this
//! home, a key the account does not use) gets its device revoked again.

use clap::Args;
use evi_shared::api::{AuthResponse, ErrorCode, PairState, PairWaitResponse};
use serde_json::json;

use super::Ctx;
use super::account::{begin, device_name, finish, load_identity};
use super::pair::{Waited, slot_error, wait_past};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::{client_error, sync_error, warn};
use crate::sync::engine::rotate::{self, local};
use crate::sync::remote::client::{Client, ClientError, check_server_url};
use crate::sync::seal::pairing::{Code, Grant, Hello, answer};
use crate::sync::state::{Account, SyncPaths};
use crate::sync::{Identity, SyncKeys};

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The code `evi sync pair` printed on the other device.
    pub code: String,
    /// Server URL, e.g. http://127.0.0.1:8787 (the one the other device
    /// syncs with).
    #[arg(long)]
    pub server: String,
    /// This device's name (default: the host name); the other device may
    /// name it otherwise.
    #[arg(long)]
    pub name: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

const NEW_CODE: &str = "run `evi sync pair` on a device that syncs, and type its new code here";

/// What a refused offer or join means to the user.
fn slot_refused(e: ClientError, code: &Code, server: &str) -> CommandError {
    match slot_error(&e) {
        Some(ErrorCode::NotFound) => user_error(format!(
            "no pairing under number {} on {server}: the code expired, or its number is mistyped",
            code.slot
        ))
        .hinted(NEW_CODE),
        Some(_) => user_error(
            "this code was used already: another device joined with it (a code allows one attempt)",
        )
        .hinted(NEW_CODE),
        None => client_error(e),
    }
}

/// Takes back the device the other side added for us, when this home
/// cannot use it.
fn give_back(authed: &Client, grant: &Grant) {
    if let Err(e) = authed.revoke(&grant.device_id) {
        warn(&format!(
            "could not revoke the device {} made for this pairing ({e}); revoke it from the \
             other device: evi sync revoke {}",
            grant.device_name, grant.device_id
        ));
    }
}

pub fn cmd_sync_join(ctx: &Ctx, args: JoinArgs) -> CommandResult {
    check_server_url(&args.server).map_err(client_error)?;
    let code = Code::parse(&args.code).map_err(|e| {
        usage_error(e).hinted("type the code exactly as `evi sync pair` printed it")
    })?;
    let (paths, _lock, mut state) = begin(ctx)?;
    // A home whose account's key was rotated elsewhere (or whose device was
    // revoked) joins again: its key and the state that named old keyed ids
    // are replaced once the new key checks out.
    let rejoin = match &state.account {
        Some(a) if key_was_rotated(&paths, a) => true,
        Some(a) => {
            return Err(user_error(format!(
                "this eVi home already syncs as {} on {} (device {})",
                a.user, a.server, a.device
            ))
            .hinted("to set up another account, use another EVI_HOME"));
        }
        None => false,
    };
    // Joining again: the name this home had, unless told otherwise.
    let old_name = state
        .account
        .as_ref()
        .filter(|_| rejoin)
        .map(|a| a.device.as_str());
    let device = device_name(args.name.as_deref().or(old_name))?;
    // The device this home was before the rotation is of no use any more:
    // the new one takes its place (and so its name) in the step that adds
    // it. Should that step not happen, the old token still says "pair
    // again" (or, once it is gone, "revoked"), so this home can join again.
    let stale = state
        .account
        .as_ref()
        .filter(|_| rejoin)
        .map(|a| a.device_id.clone());
    let have = if paths.identity().exists() {
        Some(load_identity(&paths)?)
    } else {
        None
    };
    let anon = Client::new(&args.server, None).map_err(client_error)?;
    let server = anon.server().to_owned();
    let offer = anon
        .pair_offer(code.slot)
        .map_err(|e| slot_refused(e, &code, &server))?;
    let (keys, hello) = answer(
        &code,
        &offer.offer.0,
        &Hello {
            device: device.clone(),
            replaces: stale.clone(),
        },
    )
    .map_err(user_error)?;
    let joined = anon
        .pair_join(code.slot, &hello)
        .map_err(|e| slot_refused(e, &code, &server))?;
    let mine = anon.with_token(joined.secret.clone());
    if !args.json {
        eprintln!(
            "joined pairing {}; waiting for the other device to confirm…",
            code.slot
        );
    }
    let reply = match wait_past(&mine, code.slot, PairState::Joined)? {
        Waited::Moved(PairWaitResponse {
            state: PairState::Replied,
            message: Some(m),
        }) => m.0,
        Waited::Moved(_) => {
            return Err(user_error(
                "the other device ended the pairing: the code typed was not its code, or its \
                 user declined; nothing was stored",
            )
            .hinted(NEW_CODE));
        }
        Waited::Expired => {
            return Err(user_error(
                "the other device did not answer before the code expired; nothing was stored",
            )
            .hinted(NEW_CODE));
        }
    };
    let grant = match keys.open_reply(&reply) {
        Ok(g) => g,
        Err(e) => {
            let _ = mine.pair_close(code.slot);
            return Err(user_error(format!(
                "the reply relayed by {server} does not check out ({e}); nothing was stored"
            ))
            .hinted(
                "the server may be compromised; pair again, and if it repeats, ask its operator",
            ));
        }
    };
    let identity = Identity::from_secret_str(&grant.identity).map_err(|e| sync_error(e.into()))?;
    let authed = Client::new(&server, Some(grant.token.clone())).map_err(client_error)?;
    if let Some(old) = state.account.as_ref().filter(|_| rejoin)
        && old.user != grant.user
    {
        give_back(&authed, &grant);
        let _ = mine.pair_close(code.slot);
        return Err(user_error(format!(
            "this eVi home synced as {} and the other device pairs it into {}: nothing was \
             changed",
            old.user, grant.user
        ))
        .hinted("to set up another account, use another EVI_HOME"));
    }
    if let Some(have) = &have
        && have.fingerprint() != identity.fingerprint()
        && !rejoin
    {
        give_back(&authed, &grant);
        let _ = mine.pair_close(code.slot);
        return Err(user_error(format!(
            "this device already has another key ({}) in {}; it is never overwritten",
            have.fingerprint(),
            paths.identity().display()
        ))
        .hinted(format!(
            "if the account's key (fingerprint {}) is the right one, move the key here away \
             (mv {} {}) and pair again",
            identity.fingerprint(),
            paths.identity().display(),
            paths.dir.join("identity.unused.txt").display()
        )));
    }
    let sync_keys = SyncKeys::derive(&identity);
    match authed.key_check() {
        Ok(Some(kcv)) if !sync_keys.matches_key_check(&kcv) => {
            give_back(&authed, &grant);
            let _ = mine.pair_close(code.slot);
            return Err(user_error(
                "the key the other device sent is not the key its account uses; nothing was stored",
            )
            .hinted("on the other device, check `evi sync status`, then pair again"));
        }
        Ok(Some(_)) => {}
        Ok(None) => authed
            .set_key_check(&sync_keys, None)
            .map_err(client_error)?,
        Err(e) => return Err(client_error(e)),
    }
    if rejoin {
        if have.as_ref().map(Identity::fingerprint) != Some(identity.fingerprint()) {
            replace_key(&paths, &identity)?;
        }
        rotate::reset_for_rejoin(&mut state);
        crate::sync::engine::unfinished::mark_unfinished(&paths).map_err(sync_error)?;
        rotate::rekey_ledger(&paths.dir, &sync_keys).map_err(sync_error)?;
    } else if have.is_none() {
        identity
            .save_new(&paths.identity())
            .map_err(|e| sync_error(e.into()))?;
    }
    let auth = AuthResponse {
        token: grant.token.clone(),
        device_id: grant.device_id.clone(),
        user: grant.user.clone(),
        device_name: grant.device_name.clone(),
    };
    // A creator or server from before `replaces` left the old device: it
    // goes now, so the account lists this home once.
    let stale = stale.filter(|id| *id != grant.device_id);
    let state = if rejoin { state } else { Default::default() };
    let name = finish(&paths, state, &server, &device, auth)?;
    if let Some(id) = stale
        && let Err(e) = authed.revoke(&id)
        && !matches!(e.code(), Some(ErrorCode::NotFound))
    {
        warn(&format!(
            "could not revoke this home's device from before the key rotation ({e}); \
             `evi sync revoke {id}` does it"
        ));
    }
    // Done: the other device reports the pairing; the slot keeps nothing.
    if let Err(e) = mine.pair_close(code.slot) {
        warn(&format!(
            "this device is set up, but the other device could not be told ({e}); it will say \
             the pairing did not finish: this device works all the same"
        ));
    }
    if args.json {
        println!(
            "{}",
            json!({"outcome": "joined", "user": grant.user, "server": server, "device": name,
                   "device_id": grant.device_id, "key_fingerprint": identity.fingerprint()})
        );
    } else {
        println!(
            "joined: {} on {server} as device {name} (key {})\nnow run `evi sync pull` to fetch \
             what the other devices pushed",
            grant.user,
            identity.fingerprint()
        );
    }
    Ok(())
}

/// Whether the server tells this home's token that the account's key was
/// rotated, or no longer takes it (revoked): then the home may join again.
fn key_was_rotated(paths: &SyncPaths, a: &Account) -> bool {
    let Ok(token) = std::fs::read_to_string(paths.token()) else {
        return false;
    };
    let Ok(client) = Client::new(&a.server, Some(token.trim().to_owned())) else {
        return false;
    };
    match client.key_check() {
        Err(e) => rotate::is_key_rotated(&e) || crate::sync::remote::client::is_unauthorized(&e),
        Ok(_) => false,
    }
}

/// Puts the account's new key in place of the rotated one: the old aside
/// as `sync/identity.old.txt` (0600, deleted after the next successful
/// sync), the new one over `identity.txt` in one rename.
fn replace_key(paths: &SyncPaths, identity: &Identity) -> Result<(), CommandError> {
    let io = |e: std::io::Error| {
        sync_error(crate::sync::error::SyncError::Io {
            context: "cannot put the new key in place".into(),
            source: e,
        })
    };
    if let Ok(old) = std::fs::read(paths.identity()) {
        crate::fsutil::replace_file(&local::old_identity(paths), &old).map_err(io)?;
    }
    let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    crate::fsutil::replace_file(&paths.identity(), identity.file_text(&created).as_bytes())
        .map_err(io)
}
