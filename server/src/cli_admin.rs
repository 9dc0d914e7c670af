//! `evi-server admin …` as the operator types it: the flags, the table or
//! JSON it prints, and the question before a delete (see
//! [`evi_server::admin`] for what each does to the store). Part of the
//! binary only.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use clap::Subcommand;
use evi_server::Config;
use evi_server::admin::{Admin, AdminError};
use evi_server::store::admin::AccountRow;
use serde_json::json;

use crate::Failure;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// List the accounts: devices, last contact, records, entries, blobs,
    /// bytes stored (what the quota counts) and whether disabled.
    Accounts,
    /// Refuse the account's tokens and logins at once, on every replica;
    /// its data is kept, and `enable` takes it back.
    Disable { user: String },
    /// Take back an account `disable` refused.
    Enable { user: String },
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
                let list: Vec<_> = rows.iter().map(account_json).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
            } else {
                print_table(&rows);
            }
        }
        AdminCommand::Disable { user } => toggle(&admin, &user, true, json).await?,
        AdminCommand::Enable { user } => toggle(&admin, &user, false, json).await?,
        AdminCommand::Delete { user, yes } => {
            if !yes && !confirm(&user)? {
                return Err(Failure::new("nothing was deleted"));
            }
            let row = admin.delete(&user).await.map_err(failure)?;
            if json {
                println!("{}", json!({"deleted": account_json(&row)}));
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

fn failure(e: AdminError) -> Failure {
    let hint = match &e {
        AdminError::NoDatabase(_) => {
            Some("pass the --data folder (or --database URL) the server runs with".to_owned())
        }
        AdminError::NoSuchAccount(_) => {
            Some("`evi-server admin accounts` lists the accounts".to_owned())
        }
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

fn account_json(a: &AccountRow) -> serde_json::Value {
    let at = |t: Option<i64>| {
        t.and_then(|t| chrono::DateTime::from_timestamp(t, 0))
            .map(|t| t.to_rfc3339())
    };
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
    })
}

fn print_table(rows: &[AccountRow]) {
    if rows.is_empty() {
        println!("no accounts");
        return;
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:width$}  {:>7}  {:20}  {:>9}  {:>9}  {:>6}  {:>14}  DISABLED",
        "USER", "DEVICES", "LAST SEEN", "RECORDS", "ENTRIES", "BLOBS", "BYTES"
    );
    for r in rows {
        println!(
            "{:width$}  {:>7}  {:20}  {:>9}  {:>9}  {:>6}  {:>14}  {}",
            r.name,
            r.devices,
            time(r.last_seen_at),
            r.records,
            r.entries,
            r.blobs,
            r.bytes_used,
            r.disabled_at
                .map_or_else(|| "no".to_owned(), |t| time(Some(t))),
        );
    }
}
