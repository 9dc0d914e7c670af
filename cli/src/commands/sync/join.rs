//! `evi sync join CODE --server URL`: put this device on an account with
//! the code `evi sync pair` printed on one of its devices.
//!
//! Nothing is written until everything checked out: the other device
//! confirmed the PAKE key, its sealed reply opened, the identity it sent
//! matches the account's key check value and the token it sent works. Then
//! the identity (0600), the state and the token are written, and the slot
//! is closed; if closing fails, what was written is taken back (the other
//! device revokes the token it made when the pairing does not finish). A
//! wrong code writes nothing and burns the code on both sides.

use std::io::Write;

use chrono::Utc;
use clap::Args;
use evi_shared::api::{AuthResponse, ErrorCode, PairState};

use super::account::{begin, device_name, finish};
use super::key::identity_error;
use super::{Ctx, client_error, sync_error};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::sync::client::{Client, ClientError, check_server_url};
use crate::sync::pairing::{self, Code, Hello, PairError};
use crate::sync::state::SyncState;
use crate::sync::{Identity, SyncKeys};

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The code `evi sync pair` printed on the other device (like 7-apple-river).
    pub code: String,
    /// Server URL, the one the other device syncs with.
    #[arg(long)]
    pub server: String,
    /// This device's name (default: the host name).
    #[arg(long)]
    pub device: Option<String>,
    /// The outcome as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

const START_AGAIN: &str = "on the other device run `evi sync pair` for a new code, then here \
                           `evi sync join NEWCODE --server URL`";

/// A failure before the reply: a slot gone is a code that expired, was
/// used or was mistyped.
fn slot_error(code: &Code, server: &str, e: ClientError) -> CommandError {
    match e.code() {
        Some(ErrorCode::NotFound) => user_error(format!(
            "{server} has no pairing numbered {}: the code expired, was used, or its number \
             is mistyped; nothing was written",
            code.slot
        ))
        .hinted(START_AGAIN),
        Some(ErrorCode::PairingTaken) => user_error(format!(
            "another device already joined pairing {} (a code works once); nothing was written",
            code.slot
        ))
        .hinted(START_AGAIN),
        _ => client_error(e),
    }
}

pub fn cmd_sync_join(ctx: &Ctx, args: JoinArgs) -> CommandResult {
    check_server_url(&args.server).map_err(client_error)?;
    let code = Code::parse(&args.code)
        .map_err(|e| usage_error(e).hinted("type the code `evi sync pair` printed"))?;
    let device = device_name(args.device.as_deref())?;
    let (paths, _lock, state) = begin(ctx)?;
    if let Some(a) = &state.account {
        return Err(user_error(format!(
            "this eVi home already syncs as {} on {} (device {})",
            a.user, a.server, a.device
        ))
        .hinted(
            "pairing is for a device that is not set up yet; use another EVI_HOME to join \
                 another account",
        ));
    }
    // A key left here (an earlier import) must be the account's.
    let existing = if paths.identity().exists() {
        Some(Identity::load(&paths.identity()).map_err(identity_error)?)
    } else {
        None
    };
    let client = Client::new(&args.server, None).map_err(client_error)?;
    let server = client.server().to_owned();
    let offer = client
        .pair_offer(code.slot)
        .map_err(|e| slot_error(&code, &server, e))?;
    let (hello, keys) = pairing::joiner_hello(
        &code,
        &offer.offer.0,
        &Hello {
            device: device.clone(),
        },
    )
    .map_err(user_error)?;
    let joined = client
        .pair_join(code.slot, &hello)
        .map_err(|e| slot_error(&code, &server, e))?;
    if !args.json {
        eprintln!(
            "joined pairing {}; waiting for the other device to confirm…",
            code.slot
        );
    }
    let slot = Client::new(&server, Some(joined.secret.clone())).map_err(client_error)?;
    let reply = loop {
        let w = slot
            .pair_wait(code.slot, PairState::Joined)
            .map_err(|e| slot_error(&code, &server, e))?;
        match w.state {
            PairState::Joined => {
                if Utc::now() >= offer.expires_at {
                    return Err(user_error(
                        "the other device did not answer before the code expired; nothing \
                         was written",
                    )
                    .hinted(START_AGAIN));
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            PairState::Replied => {
                break w.message.ok_or_else(|| {
                    user_error("the server answered a reply without its message")
                })?;
            }
            PairState::Mismatch => {
                return Err(user_error(
                    "the code does not match the pairing on the other device; nothing was \
                     written, and that code is used up",
                )
                .hinted(START_AGAIN));
            }
            PairState::Declined => {
                return Err(user_error(
                    "the other device did not accept this one; nothing was written",
                ));
            }
            other => {
                return Err(user_error(format!(
                    "the pairing ended ({other:?}); nothing was written"
                ))
                .hinted(START_AGAIN));
            }
        }
    };
    let grant = pairing::joiner_open_reply(&keys, &reply.0).map_err(|e| match e {
        PairError::Mismatch => user_error(
            "the reply is not from the device that printed the code (its key confirmation \
             fails); nothing was written",
        )
        .hinted("the server or something between may be tampering; pair again"),
        e => user_error(e),
    })?;
    let identity = Identity::parse_file(&grant.identity).map_err(identity_error)?;
    let authed = Client::for_account(&server, Some(grant.token.clone())).map_err(client_error)?;
    let sync_keys = SyncKeys::derive(&identity);
    let key_ok = match authed.key_check().map_err(client_error)? {
        Some(kcv) => sync_keys.matches_key_check(&kcv),
        None => true,
    };
    let same_as_here = existing
        .as_ref()
        .is_none_or(|e| e.fingerprint() == identity.fingerprint());
    if !key_ok || !same_as_here {
        let _ = authed.revoke(&grant.device_id);
        let why = if key_ok {
            format!(
                "this home already holds another key ({}) than the account's; nothing was written",
                paths.identity().display()
            )
        } else {
            "the key the other device sent is not the account's key; nothing was written".to_owned()
        };
        return Err(user_error(why).hinted(format!(
            "move {} away and join again",
            paths.identity().display()
        )));
    }
    let made_identity = existing.is_none();
    if made_identity {
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
    let undo = || {
        let _ = std::fs::remove_file(paths.token());
        let _ = std::fs::remove_file(paths.state());
        if made_identity {
            let _ = std::fs::remove_file(paths.identity());
        }
    };
    let named = match finish(&paths, SyncState::default(), &server, &device, auth) {
        Ok(n) => n,
        Err(e) => {
            undo();
            let _ = authed.revoke(&grant.device_id);
            return Err(e);
        }
    };
    if let Err(e) = slot.pair_done(code.slot) {
        undo();
        let _ = authed.revoke(&grant.device_id);
        return Err(client_error(e)
            .hinted("the pairing could not be closed, so nothing is kept here; pair again"));
    }
    if args.json {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "joined": true,
                "user": grant.user,
                "server": server,
                "device": named,
                "device_id": grant.device_id,
                "fingerprint": identity.fingerprint(),
            })
        )?;
        out.flush()?;
    } else {
        println!(
            "joined: {} on {server} as device {named} (key {}); run `evi sync pull` to fetch \
             what the other devices pushed",
            grant.user,
            identity.fingerprint()
        );
    }
    Ok(())
}
