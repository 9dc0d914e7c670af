//! `evi sync pair`: add a device to this account with a short code, no
//! password typed and no key file carried (see [`crate::sync::pairing`]).
//!
//! This device opens a slot on the server, prints the code and waits (up to
//! the slot's lifetime, ten minutes) for a device to join with it. It then
//! checks the joiner's key confirmation (a wrong code burns the slot and
//! nothing is sent), names the joining device and asks (`--yes` for
//! scripts), has the server make that device's token, and sends identity,
//! account name and token sealed under the PAKE key. It reports success
//! only once the new device has taken them; if it never does, the token
//! made for it is revoked again. The sync lock is not held while waiting:
//! push, pull and watch go on meanwhile.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;
use evi_shared::SessionId;
use evi_shared::api::{ErrorCode, PairState};

use super::{Ctx, client_error, open};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::sync::client::{Client, ClientError};
use crate::sync::pairing::{self, Code, Grant, PairError};

#[derive(Debug, Args)]
pub struct PairArgs {
    /// Add the device that joins without asking (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// JSON lines on stdout: `{"code": …}` first, then the outcome.
    #[arg(long)]
    pub json: bool,
}

/// Prints one line of `--json` output at once (the code must reach a
/// script before the wait).
fn json_line(v: serde_json::Value) -> Result<(), CommandError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    out.flush()?;
    Ok(())
}

/// Ends a failed pairing: with `--json` its outcome line first.
fn failed(json: bool, outcome: &str, err: CommandError) -> CommandError {
    if json {
        let _ = json_line(serde_json::json!({"paired": false, "outcome": outcome}));
    }
    err
}

fn expired() -> CommandError {
    user_error("the pairing code expired before a device joined with it; nothing was added")
        .hinted("run `evi sync pair` again for a new code")
}

/// A wait error: a slot gone (404) is an expired code.
fn wait_error(e: ClientError) -> CommandError {
    if e.code() == Some(ErrorCode::NotFound) {
        return expired();
    }
    client_error(e)
}

/// Waits while the slot is in `state`, until `deadline`.
fn wait_past(
    client: &Client,
    slot: u32,
    state: PairState,
    deadline: DateTime<Utc>,
) -> Result<evi_shared::api::PairWaitResponse, CommandError> {
    loop {
        let w = client.pair_wait(slot, state).map_err(wait_error)?;
        if w.state != state {
            return Ok(w);
        }
        if Utc::now() >= deadline {
            return Err(expired());
        }
        // The server answers "not yet" after its cap; ask again at once,
        // unless it answered early (a proxy cutting long polls short).
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks on the terminal whether to add `device`.
fn confirm(device: &str, user: &str, server: &str) -> Result<bool, CommandError> {
    eprint!("add the device {device:?} to {user}'s account on {server}? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES"))
}

pub fn cmd_sync_pair(ctx: &Ctx, args: PairArgs) -> CommandResult {
    if !args.yes && !std::io::stdin().is_terminal() {
        return Err(usage_error(
            "the device that joins is named and confirmed on a terminal, and this is none",
        )
        .hinted(
            "run it on a terminal, or pass --yes to add the device that joins without asking",
        ));
    }
    // What the pairing needs, then the lock goes: the wait takes minutes.
    let (client, account, identity_text) = {
        let sync = open(ctx)?;
        let text = sync.identity.file_text(&Utc::now().to_rfc3339());
        (sync.client.clone(), sync.account.clone(), text)
    };
    let words = pairing::new_words().map_err(user_error)?;
    let pake = pairing::start(&words);
    let slot = client
        .pair_create(&pake.message)
        .map_err(|e| match e.code() {
            Some(ErrorCode::PairingLimit) => {
                user_error(&e).hinted("wait for one to finish or expire")
            }
            _ => client_error(e),
        })?;
    let n = slot.slot;
    let code = Code::new(n, words);
    if args.json {
        json_line(serde_json::json!({
            "code": code.to_string(),
            "server": account.server,
            "expires_at": slot.expires_at,
        }))?;
    } else {
        println!("pairing code: {code}");
        println!(
            "on the new device run:\n  evi sync join {code} --server {}",
            account.server
        );
        std::io::stdout().flush()?;
        let mins = ((slot.expires_at - Utc::now()).num_seconds().max(0) + 59) / 60;
        eprintln!("waiting for it (the code works once, for {mins} min)…");
    }
    let deadline = slot.expires_at;
    let joined = wait_past(&client, n, PairState::Open, deadline)
        .map_err(|e| failed(args.json, "expired", e))?;
    if joined.state != PairState::Joined {
        return Err(failed(
            args.json,
            "ended",
            user_error(format!(
                "the pairing ended ({:?}) before a device joined",
                joined.state
            )),
        ));
    }
    let Some(hello) = joined.message else {
        return Err(user_error(
            "the server answered a join without the device's message",
        ));
    };
    let (hello, keys) = match pairing::creator_open_hello(pake, &hello.0) {
        Ok(v) => v,
        Err(e) => {
            // One attempt per code: the slot is burnt, the joiner told.
            let _ = client.pair_reply(n, PairState::Mismatch, None);
            let msg = match e {
                PairError::Mismatch => {
                    "a device joined with a different code: nothing was sent to it and the code \
                     is used up"
                        .to_owned()
                }
                e => format!(
                    "the device that joined sent something unreadable ({e}); nothing was sent"
                ),
            };
            return Err(failed(
                args.json,
                "mismatch",
                user_error(msg).hinted("run `evi sync pair` again and type the new code exactly"),
            ));
        }
    };
    if hello.device.parse::<SessionId>().is_err() {
        let _ = client.pair_reply(n, PairState::Declined, None);
        return Err(failed(
            args.json,
            "declined",
            user_error(format!(
                "the joining device asks for an unusable name {:?}",
                hello.device
            ))
            .hinted("on the new device pass --device NAME (letters, digits, '.', '_', '-')"),
        ));
    }
    if !args.yes && !confirm(&hello.device, &account.user, &account.server)? {
        let _ = client.pair_reply(n, PairState::Declined, None);
        return Err(failed(
            args.json,
            "declined",
            user_error(format!("{} was not added", hello.device)),
        ));
    }
    let auth = client
        .pair_device(n, &hello.device)
        .map_err(|e| failed(args.json, "error", client_error(e)))?;
    let grant = Grant {
        identity: identity_text.to_string(),
        user: auth.user.clone(),
        token: auth.token.clone(),
        device_id: auth.device_id.clone(),
        device_name: auth.device_name.clone(),
    };
    let reply = pairing::creator_reply(&keys, &grant);
    drop(grant);
    // From here a failure takes the new device's token back.
    let revoke = |e: CommandError| {
        let _ = client.revoke(&auth.device_id);
        failed(args.json, "error", e)
    };
    client
        .pair_reply(n, PairState::Replied, Some(reply))
        .map_err(|e| revoke(client_error(e)))?;
    let done = wait_past(&client, n, PairState::Replied, deadline).map_err(|_| {
        revoke(user_error(
            "the new device did not take the pairing in time; the token made for it was revoked",
        ))
    })?;
    if done.state != PairState::Done {
        return Err(revoke(user_error(format!(
            "the pairing ended ({:?}) before the new device took it; its token was revoked",
            done.state
        ))));
    }
    if args.json {
        json_line(serde_json::json!({
            "paired": true,
            "outcome": "paired",
            "device": auth.device_name,
            "device_id": auth.device_id,
        }))?;
    } else {
        println!(
            "paired: {} ({}) now syncs as {} on {}",
            auth.device_name, auth.device_id, account.user, account.server
        );
    }
    Ok(())
}
