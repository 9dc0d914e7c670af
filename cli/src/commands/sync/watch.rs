//! `evi sync watch`: the watcher in the foreground, its events one line
//! each (text on stderr, or `--json` lines on stdout); `--install` and
//! `--uninstall` set it up as a user service (see [`super::service`]).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{pairing_steps, sync_error};
use crate::sync::engine::watch::{WatchError, WatchEvent, WatchLog, WatchOptions, run};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Print each event as a JSON line on stdout (stable, documented in
    /// docs/json.md) instead of text on stderr.
    #[arg(long)]
    pub json: bool,
    /// Write and enable a user service that runs `evi sync watch` for this
    /// home (systemd on Linux, launchd on macOS).
    #[arg(long, conflicts_with = "uninstall")]
    pub install: bool,
    /// With --install: write the service file only, and print the command
    /// that enables it.
    #[arg(long, requires = "install")]
    pub no_enable: bool,
    /// Stop and remove the user service.
    #[arg(long)]
    pub uninstall: bool,
    /// Milliseconds without a file event before a push.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub quiet_ms: u64,
    /// Seconds between full scans, the safety net for missed events.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub scan_secs: u64,
    /// Seconds per long poll on the server (default: 25 to 55, drawn each
    /// time).
    #[arg(long, value_name = "SECS")]
    pub wait_secs: Option<u32>,
    /// Longest backoff, in seconds, while the server does not answer.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub backoff_max_secs: u64,
}

/// One event as `--json` prints it.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    #[serde(flatten)]
    event: &'a WatchEvent,
}

struct Printer {
    json: bool,
}

impl WatchLog for Printer {
    fn log(&self, event: WatchEvent) {
        if self.json {
            let line = Line {
                time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                event: &event,
            };
            let mut out = std::io::stdout().lock();
            if let Ok(text) = serde_json::to_string(&line) {
                // A closed pipe ends nothing: the watcher syncs on.
                let _ = writeln!(out, "{text}").and_then(|()| out.flush());
            }
        } else {
            eprintln!(
                "{} {}",
                chrono::Local::now().format("%H:%M:%S"),
                text(&event)
            );
        }
    }
}

/// An event as a person reads it.
fn text(e: &WatchEvent) -> String {
    match e {
        WatchEvent::Started { server, pid } => {
            format!("watching this home, syncing with {server} (pid {pid})")
        }
        WatchEvent::Pushed {
            entries,
            sessions,
            journal_lines,
            blobs,
            ..
        } => format!(
            "pushed {entries} entries in {sessions} sessions, {journal_lines} journal lines, {blobs} blobs"
        ),
        WatchEvent::Pulled {
            entries,
            sessions,
            blobs,
            waiting,
            ..
        } => {
            let mut s = format!("pulled {entries} entries in {sessions} sessions, {blobs} blobs");
            if *waiting > 0 {
                s.push_str(&format!(
                    "; {waiting} wait until eVi finishes the line it is writing"
                ));
            }
            s
        }
        WatchEvent::ServerAway { error } => {
            format!("the server does not answer ({error}); retrying with backoff")
        }
        WatchEvent::ServerBack { away_secs } => {
            format!("the server answers again (away {away_secs} s); catching up")
        }
        WatchEvent::Woke { slept_secs } => {
            format!("woke after about {slept_secs} s asleep; catching up")
        }
        WatchEvent::Failed { what, error } => {
            format!("{what} failed: {error}; trying again at the next scan")
        }
        WatchEvent::NotPushed { items } => format!("not pushed: {}", items.join("; ")),
        WatchEvent::ServerWentBack { message } => format!(
            "warning: {message}. This watcher did so for this device: it pulled what the server \
             holds now and pushes everything here again"
        ),
        WatchEvent::Damaged { records } if records.is_empty() => {
            "every damaged record verifies now and is applied".to_owned()
        }
        WatchEvent::Damaged { records } => format!(
            "not applied, these records from the server do not verify: {}; the rest was. Run \
             `evi sync verify --repair` on a device that has those sessions",
            records.join("; ")
        ),
        WatchEvent::WaitingForLogin { error } => format!(
            "the server refused this device's token ({error}); waiting for `evi sync login` on \
             this device, then syncing goes on by itself"
        ),
        WatchEvent::LoggedIn => "logged in again; syncing with the new token".to_owned(),
        WatchEvent::KeyRotated { error, server } => format!(
            "{error}. This device must be paired again: run {}. Until then this watcher asks \
             the server nothing; it syncs on by itself once this device has joined",
            pairing_steps("on a device that has the new key", "here", server)
        ),
        WatchEvent::Rejoined => {
            "paired again: syncing with the new key (what this device had not pushed goes up)"
                .to_owned()
        }
    }
}

pub fn cmd_sync_watch(ctx: &Ctx, args: WatchArgs) -> CommandResult {
    if args.install {
        return super::service::install(ctx, !args.no_enable);
    }
    if args.uninstall {
        return super::service::uninstall(ctx);
    }
    let opts = WatchOptions {
        quiet: Duration::from_millis(args.quiet_ms),
        scan_every: Duration::from_secs(args.scan_secs.max(1)),
        wait_secs: args.wait_secs.map(|s| s.max(1)),
        backoff_max: Duration::from_secs(args.backoff_max_secs.max(1)),
        ..WatchOptions::default()
    };
    // The engine's waits (a held lock) go to the same place as its events.
    crate::sync::notice::set_sink(|msg| eprintln!("{msg}"));
    let log = Arc::new(Printer { json: args.json });
    match run(&ctx.home, opts, log) {
        Ok(()) => Ok(()),
        Err(WatchError::Sync(e)) => Err(sync_error(e)),
        Err(e @ WatchError::Presence(_)) => Err(user_error(e)
            .hinted("one watcher per home: stop the other one first (`evi sync status` shows it)")),
        Err(e) => Err(user_error(e)),
    }
}
