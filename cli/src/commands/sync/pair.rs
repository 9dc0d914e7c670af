//! `evi sync pair`: on a device that syncs, print a short code and add the
//! device that joins with it (`evi sync join CODE --server URL`).
//!
//! The sync lock is held only to read the account: the wait for the other
//! device (up to the server's `--pair-ttl`) does not hold up push, pull or
//! watch. Nothing is added to the account until the new device proved it
//! holds the code (its key confirmation) and this device's user said yes
//! (or `--yes`); a device added for a pairing that then fails is revoked
//! again, so a failed pairing leaves no device and no token behind.

use std::io::Write;

use clap::Args;
use evi_shared::SessionId;
use evi_shared::api::{AuthResponse, PairState, PairWaitResponse};
use serde_json::json;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::{ask, client_error, needs_terminal, open_sync, warn};
use crate::sync::remote::client::{Client, ClientError};
use crate::sync::seal::pairing::{Code, Creator, Grant, PairError, new_words};

#[derive(Debug, Args)]
pub struct PairArgs {
    /// Add the device that joins without asking (for scripts; else the
    /// terminal asks).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print JSON: a first line `{"code": …, "expires_at": …}`, then a line
    /// with the outcome.
    #[arg(long)]
    pub json: bool,
    /// The new device's name (default: the one it asks for).
    #[arg(long)]
    pub name: Option<String>,
}

/// Seconds one long poll of the slot may wait.
const POLL_SECS: u32 = 25;

/// How a wait on the slot ended.
pub(super) enum Waited {
    /// It moved on: its state, with the message waited for.
    Moved(PairWaitResponse),
    /// The server no longer has it: it expired.
    Expired,
}

/// Long polls the slot until it leaves `state`, or expires.
pub(super) fn wait_past(
    client: &Client,
    slot: u32,
    state: PairState,
) -> Result<Waited, CommandError> {
    loop {
        match client.pair_wait(slot, state, POLL_SECS) {
            Ok(w) if w.state == state => continue,
            Ok(w) => return Ok(Waited::Moved(w)),
            Err(e) if e.code() == Some(evi_shared::api::ErrorCode::NotFound) => {
                return Ok(Waited::Expired);
            }
            Err(e) => return Err(client_error(e)),
        }
    }
}

/// Prints the outcome line of `--json`.
fn outcome(json: bool, value: serde_json::Value) -> Result<(), CommandError> {
    if json {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{value}")?;
        out.flush()?;
    }
    Ok(())
}

/// Ends the slot, saying so if the server cannot be told (it expires).
fn close(client: &Client, slot: u32) {
    if let Err(e) = client.pair_close(slot) {
        warn(&format!(
            "could not end the pairing on the server ({e}); it expires by itself"
        ));
    }
}

/// Takes back a device added for a pairing that did not finish.
fn revoke(client: &Client, auth: &AuthResponse) {
    if let Err(e) = client.revoke(&auth.device_id) {
        warn(&format!(
            "could not revoke the device {} added for this pairing ({e}): \
             run `evi sync revoke {}`",
            auth.device_name, auth.device_id
        ));
    }
}

/// Whether this device's user says yes to adding `name` (`again`: a
/// device of the account pairing again after a key rotation).
fn confirm(name: &str, again: bool, user: &str, server: &str) -> Result<bool, CommandError> {
    if again {
        ask(&format!(
            "pair the device {name:?} again with {user} on {server} (in place of its device \
             from before the key rotation)?"
        ))
    } else {
        ask(&format!("add the device {name:?} to {user} on {server}?"))
    }
}

fn check_name(name: &str) -> Result<(), PairError> {
    name.parse::<SessionId>()
        .map(drop)
        .map_err(|_| PairError::Malformed("the device name is not usable"))
}

pub fn cmd_sync_pair(ctx: &Ctx, args: PairArgs) -> CommandResult {
    if !args.yes {
        needs_terminal(
            "`evi sync pair` asks before it adds the new device, and stdin is not a terminal",
            "add whichever device joins with the code",
        )?;
    }
    if let Some(n) = &args.name
        && check_name(n).is_err()
    {
        return Err(usage_error(format!("device name {n:?} is not usable"))
            .hinted("use letters, digits, '.', '_' and '-' (e.g. --name phone)"));
    }
    // The lock only for reading the account: the wait holds up nothing.
    let (identity, account, client) = {
        let sync = open_sync(ctx)?;
        (
            sync.identity.clone(),
            sync.account.clone(),
            sync.client.clone(),
        )
    };
    let words = new_words().map_err(user_error)?;
    let creator = Creator::start(words.as_bytes());
    let opened = client.pair_open(creator.offer()).map_err(client_error)?;
    let slot = opened.slot;
    let code = Code::new(slot, words);
    let until = opened.expires_at.format("%H:%M UTC");
    if args.json {
        outcome(
            true,
            json!({"code": code.to_string(), "expires_at": opened.expires_at}),
        )?;
    } else {
        println!(
            "pairing code: {code}\n\non the new device run:\n  evi sync join {code} --server {}\n\n\
             the code works once, until {until}; waiting for the new device…",
            account.server
        );
    }
    let hello = match wait_past(&client, slot, PairState::Open)? {
        Waited::Moved(PairWaitResponse {
            state: PairState::Joined,
            message: Some(m),
        }) => m.0,
        Waited::Moved(w) => {
            outcome(args.json, json!({"outcome": "closed"}))?;
            return Err(user_error(format!(
                "the pairing ended before a device joined ({:?})",
                w.state
            ))
            .hinted("run `evi sync pair` again for a new code"));
        }
        Waited::Expired => {
            outcome(args.json, json!({"outcome": "expired"}))?;
            return Err(user_error(format!(
                "no device joined before the code expired at {until}; nothing was added"
            ))
            .hinted("run `evi sync pair` again for a new code"));
        }
    };
    let (keys, asked) = match creator
        .read_hello(slot, &hello)
        .and_then(|(k, h)| check_name(&h.device).map(|()| (k, h)))
    {
        Ok(v) => v,
        Err(e) => {
            // One attempt per code: the slot ends here, and the joiner's
            // wait says so.
            close(&client, slot);
            outcome(args.json, json!({"outcome": "wrong_code"}))?;
            return Err(user_error(format!(
                "a device joined with a wrong code ({e}); the pairing is ended and nothing \
                 was added"
            ))
            .hinted("run `evi sync pair` again and type the new code exactly"));
        }
    };
    let name = args.name.clone().unwrap_or_else(|| asked.device.clone());
    let again = asked.replaces.is_some();
    if !args.yes && !confirm(&name, again, &account.user, &account.server)? {
        close(&client, slot);
        outcome(args.json, json!({"outcome": "declined"}))?;
        return Err(user_error(
            "declined: the pairing is ended and nothing was added",
        ));
    }
    let auth = match client.pair_device(slot, &name, asked.replaces.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            close(&client, slot);
            return Err(client_error(e));
        }
    };
    let grant = Grant {
        identity: identity.secret_line().to_string(),
        user: account.user.clone(),
        server: account.server.clone(),
        token: auth.token.clone(),
        device_id: auth.device_id.clone(),
        device_name: auth.device_name.clone(),
    };
    if let Err(e) = client.pair_reply(slot, &keys.seal_reply(&grant)) {
        revoke(&client, &auth);
        close(&client, slot);
        return Err(client_error(e));
    }
    drop(grant);
    match wait_past(&client, slot, PairState::Replied)? {
        Waited::Moved(PairWaitResponse {
            state: PairState::Done,
            ..
        }) => {}
        Waited::Moved(_) => {
            revoke(&client, &auth);
            outcome(args.json, json!({"outcome": "closed"}))?;
            return Err(user_error(
                "the new device ended the pairing before it was set up; its device was revoked",
            )
            .hinted("run `evi sync pair` again for a new code"));
        }
        Waited::Expired => {
            warn(&format!(
                "the new device did not say it was set up before the code expired; if it does \
                 not sync, revoke it: evi sync revoke {}",
                auth.device_id
            ));
        }
    }
    outcome(
        args.json,
        json!({"outcome": "paired", "user": account.user, "device": auth.device_name,
               "device_id": auth.device_id}),
    )?;
    if !args.json {
        println!(
            "paired: device {} ({}) added to {} on {}",
            auth.device_name, auth.device_id, account.user, account.server
        );
    }
    Ok(())
}

/// Whether `e` says the slot is gone or at another step: for the joiner's
/// messages.
pub(super) fn slot_error(e: &ClientError) -> Option<evi_shared::api::ErrorCode> {
    e.code().filter(|c| {
        matches!(
            c,
            evi_shared::api::ErrorCode::NotFound | evi_shared::api::ErrorCode::PairingState
        )
    })
}
