//! `evi-server admin …` as the operator types it: the flags, the table or
//! JSON it prints, and the question before a delete (see
//! [`evi_server::admin`] for what each does to the store). Part of the
//! binary only.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use clap::Subcommand;
use evi_server::Config;
use evi_server::admin::{Admin, AdminError, invite_id};
use evi_server::store::admin::{AccountRow, InviteRow, NO_QUOTA, effective_quota};
use serde_json::json;

use crate::{Failure, RegistrationArg};

#[derive(Subcommand)]
pub enum AdminCommand {
    /// List the accounts: devices, last contact, records, entries, blobs,
    /// bytes stored (what the quota counts), quota (`*`: the server's
    /// --quota-bytes, when given here too) and whether disabled.
    Accounts,
    /// Refuse the account's tokens and logins at once, on every replica;
    /// its data is kept, and `enable` takes it back.
    Disable { user: String },
    /// Take back an account `disable` refused.
    Enable { user: String },
    /// Give the account its own quota in bytes (what `accounts` counts in
    /// BYTES), `none` for no quota, or `default` for the server's
    /// --quota-bytes again. Holds from its next request, on every replica;
    /// what it stored already stays.
    Quota {
        user: String,
        #[arg(value_parser = parse_quota)]
        quota: QuotaArg,
    },
    /// List the invites: id, created, until when an unused one works, and
    /// who registered with a used one.
    Invites,
    /// Make an unused invite stop working now (or after --in); it stays
    /// listed.
    InviteExpire {
        /// The invite's id as `invites` lists it (at least 4 digits).
        id: String,
        /// From now, like 48h or 7d (default: at once).
        #[arg(long = "in", value_parser = parse_span)]
        after: Option<std::time::Duration>,
    },
    /// Delete an unused invite: its code registers nobody.
    InviteRevoke {
        /// The invite's id as `invites` lists it (at least 4 digits).
        id: String,
    },
    /// Show who may create an account, or set it (open, invite, closed)
    /// for every replica at once, until a server starts with another
    /// --registration.
    Registration { mode: Option<RegistrationArg> },
    /// Delete the account and every byte it stored (rows, record bodies,
    /// blobs, in the database, the data folder or the bucket); its devices
    /// stop at once and its name is free again. Asks first, unless --yes.
    Delete {
        user: String,
        /// Do not ask (for scripts; without a terminal it is required).
        #[arg(long)]
        yes: bool,
    },
}

pub async fn run(config: Config, command: AdminCommand, json: bool) -> Result<(), Failure> {
    let admin = Admin::open(config).await.map_err(failure)?;
    match command {
        AdminCommand::Accounts => {
            let rows = admin.accounts().await.map_err(failure)?;
            if json {
                let list: Vec<_> = rows
                    .iter()
                    .map(|r| account_json(r, admin.default_quota()))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
            } else {
                print_table(&rows, admin.default_quota());
            }
        }
        AdminCommand::Disable { user } => toggle(&admin, &user, true, json).await?,
        AdminCommand::Enable { user } => toggle(&admin, &user, false, json).await?,
        AdminCommand::Quota { user, quota } => {
            let own = match quota {
                QuotaArg::Default => None,
                QuotaArg::Unlimited => Some(NO_QUOTA),
                QuotaArg::Bytes(n) => Some(n),
            };
            let name = admin.set_quota(&user, own).await.map_err(failure)?;
            let q = quota_of(own, admin.default_quota());
            if json {
                println!("{}", json!({"user": name, "quota": q}));
            } else {
                println!(
                    "account {name}: quota {}",
                    quota_text(own, admin.default_quota())
                );
            }
        }
        AdminCommand::Invites => {
            let rows = admin.invites().await.map_err(failure)?;
            let now = chrono::Utc::now().timestamp();
            if json {
                let list: Vec<_> = rows.iter().map(|i| invite_json(i, now)).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
            } else {
                print_invites(&rows, now);
            }
        }
        AdminCommand::InviteExpire { id, after } => {
            let at = chrono::Utc::now().timestamp()
                + after.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2));
            admin.expire_invite(&id, at).await.map_err(failure)?;
            if json {
                println!("{}", json!({"invite": id, "expires_at": rfc3339(Some(at))}));
            } else {
                println!("invite {id} works until {}", time(Some(at)));
            }
        }
        AdminCommand::InviteRevoke { id } => {
            admin.revoke_invite(&id).await.map_err(failure)?;
            if json {
                println!("{}", json!({"invite": id, "revoked": true}));
            } else {
                println!("invite {id} revoked: its code registers nobody");
            }
        }
        AdminCommand::Registration { mode } => {
            if let Some(mode) = mode {
                admin.set_registration(mode.mode()).await.map_err(failure)?;
            }
            let mode = admin.registration().await.map_err(failure)?;
            if json {
                println!("{}", json!({"registration": mode}));
            } else {
                println!("registration: {mode}");
            }
        }
        AdminCommand::Delete { user, yes } => {
            if !yes && !confirm(&user)? {
                return Err(Failure::new("nothing was deleted"));
            }
            let row = admin.delete(&user).await.map_err(failure)?;
            if json {
                println!(
                    "{}",
                    json!({"deleted": account_json(&row, admin.default_quota())})
                );
            } else {
                println!(
                    "deleted account {}: {} devices, {} records, {} blobs, {} bytes",
                    row.name, row.devices, row.records, row.blobs, row.bytes_used
                );
            }
        }
    }
    Ok(())
}

async fn toggle(admin: &Admin, user: &str, disable: bool, json: bool) -> Result<(), Failure> {
    let name = admin.set_disabled(user, disable).await.map_err(failure)?;
    if json {
        println!("{}", json!({"user": name, "disabled": disable}));
    } else if disable {
        println!("disabled account {name}: its devices and logins are refused; its data is kept");
    } else {
        println!("enabled account {name}");
    }
    Ok(())
}

/// Asks on the terminal; refuses without one.
fn confirm(user: &str) -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(format!(
            "deleting account {user} needs confirmation, and there is no terminal to ask on"
        ))
        .hinted("pass --yes to delete without asking"));
    }
    eprint!("delete account {user} and everything it stored, for good? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// What `admin quota` takes.
#[derive(Clone, Copy)]
pub enum QuotaArg {
    Default,
    Unlimited,
    Bytes(i64),
}

fn parse_quota(s: &str) -> Result<QuotaArg, String> {
    match s {
        "default" => Ok(QuotaArg::Default),
        "none" => Ok(QuotaArg::Unlimited),
        _ => s
            .parse::<u64>()
            .ok()
            .and_then(|n| i64::try_from(n).ok())
            .map(QuotaArg::Bytes)
            .ok_or_else(|| "give a number of bytes, none, or default".to_owned()),
    }
}

fn parse_span(s: &str) -> Result<std::time::Duration, String> {
    evi_shared::span::parse_span(s).ok_or_else(|| {
        format!(
            "give a number and a unit, like {}",
            evi_shared::span::SPAN_EXAMPLES
        )
    })
}

/// An account's quota as JSON: the bytes it is held to (`null`: none) and
/// whether the account's own setting or the server's says so.
fn quota_of(own: Option<i64>, default: Option<u64>) -> serde_json::Value {
    json!({
        "bytes": effective_quota(own, default),
        "set_for": if own.is_some() { "account" } else { "server" },
    })
}

fn quota_text(own: Option<i64>, default: Option<u64>) -> String {
    match (own, default) {
        (Some(NO_QUOTA), _) => "none".to_owned(),
        (Some(q), _) => q.to_string(),
        (None, Some(d)) => format!("default ({d})"),
        (None, None) => "default".to_owned(),
    }
}

fn failure(e: AdminError) -> Failure {
    let hint = match &e {
        AdminError::NoDatabase(_) => {
            Some("pass the --data folder (or --database URL) the server runs with".to_owned())
        }
        AdminError::NoSuchAccount(_) => {
            Some("`evi-server admin accounts` lists the accounts".to_owned())
        }
        AdminError::NoSuchInvite(_) | AdminError::AmbiguousInvite(..) => Some(
            "`evi-server admin invites` lists them; a used invite cannot be changed".to_owned(),
        ),
        _ => None,
    };
    let f = Failure::new(format!("{e:#}"));
    match hint {
        Some(h) => f.hinted(h),
        None => f,
    }
}

fn time(at: Option<i64>) -> String {
    at.and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
        )
}

fn rfc3339(t: Option<i64>) -> Option<String> {
    t.and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map(|t| t.to_rfc3339())
}

/// `used`, `expired` or `unused`.
fn invite_state(i: &InviteRow, now: i64) -> &'static str {
    match (&i.used_by, i.expires_at) {
        (Some(_), _) => "used",
        (None, Some(t)) if t <= now => "expired",
        (None, _) => "unused",
    }
}

fn invite_json(i: &InviteRow, now: i64) -> serde_json::Value {
    json!({
        "id": invite_id(&i.code_hash),
        "created_at": rfc3339(Some(i.created_at)),
        "expires_at": rfc3339(i.expires_at),
        "used_by": i.used_by,
        "state": invite_state(i, now),
    })
}

fn print_invites(rows: &[InviteRow], now: i64) {
    if rows.is_empty() {
        println!("no invites");
        return;
    }
    println!("{:12}  {:20}  {:20}  STATE", "ID", "CREATED", "EXPIRES");
    for i in rows {
        println!(
            "{:12}  {:20}  {:20}  {}",
            invite_id(&i.code_hash),
            time(Some(i.created_at)),
            i.expires_at
                .map_or_else(|| "never".to_owned(), |t| time(Some(t))),
            match &i.used_by {
                Some(user) => format!("used by {user}"),
                None => invite_state(i, now).to_owned(),
            },
        );
    }
}

fn account_json(a: &AccountRow, default_quota: Option<u64>) -> serde_json::Value {
    let at = rfc3339;
    json!({
        "user": a.name,
        "created_at": at(Some(a.created_at)),
        "devices": a.devices,
        "last_seen_at": at(a.last_seen_at),
        "records": a.records,
        "entries": a.entries,
        "blobs": a.blobs,
        "bytes_used": a.bytes_used,
        "disabled": a.disabled_at.is_some(),
        "disabled_at": at(a.disabled_at),
        "quota": quota_of(a.quota_bytes, default_quota),
    })
}

fn print_table(rows: &[AccountRow], default_quota: Option<u64>) {
    if rows.is_empty() {
        println!("no accounts");
        return;
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:width$}  {:>7}  {:20}  {:>9}  {:>9}  {:>6}  {:>14}  {:>14}  DISABLED",
        "USER", "DEVICES", "LAST SEEN", "RECORDS", "ENTRIES", "BLOBS", "BYTES", "QUOTA"
    );
    for r in rows {
        println!(
            "{:width$}  {:>7}  {:20}  {:>9}  {:>9}  {:>6}  {:>14}  {:>14}  {}",
            r.name,
            r.devices,
            time(r.last_seen_at),
            r.records,
            r.entries,
            r.blobs,
            r.bytes_used,
            match (r.quota_bytes, default_quota) {
                (None, Some(d)) => format!("{d}*"),
                (own, _) => quota_text(own, None),
            },
            r.disabled_at
                .map_or_else(|| "no".to_owned(), |t| time(Some(t))),
        );
    }
}
