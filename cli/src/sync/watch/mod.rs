//! `evi sync watch`: push what eVi writes shortly after it writes it, pull
//! what other devices push as it arrives.
//!
//! # Promises
//!
//! - Everything push and pull promise still holds: the watcher runs the
//!   same push and pull, each under the sync lock for its own duration only,
//!   so a manual `evi sync push` or `pull` runs beside it (one waits for the
//!   other's step, never for the watcher's life). A partial last line is
//!   never pushed: push only sends complete lines, and the line goes up
//!   once eVi ends it.
//! - A push starts [`WatchOptions::quiet`] after the last file event (and
//!   no later than [`WatchOptions::max_delay`] after the first one of a
//!   burst); a full push runs every [`WatchOptions::scan_every`] whatever
//!   the events said, so a missed event delays a line, never loses it.
//! - Other devices' records are pulled as soon as the server's long poll
//!   says they committed.
//! - A server that does not answer is said once (and once when it is back),
//!   retried with exponential backoff and jitter, and caught up with (push
//!   and pull) when it answers again; so is a wake from sleep (a jump of the
//!   wall clock past the monotonic one).
//! - Killed at any moment, it leaves what a killed push or pull leaves:
//!   nothing torn, and the next run (or manual sync) goes on from there.
//! - One watcher per home ([`presence`]).

pub mod files;
pub mod presence;
pub mod remote;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::client::{Client, ClientError, is_unauthorized};
use super::context::SyncContext;
use super::error::{IoContext, SyncError};
use super::progress::Quiet;
use super::state::{SyncPaths, SyncState};
use crate::home::EviHome;
use presence::{Presence, PresenceError};
use remote::{Backoff, Remote};

/// How a watcher runs; the defaults are what `evi sync watch` uses.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub quiet: Duration,
    pub max_delay: Duration,
    pub scan_every: Duration,
    /// Seconds per long poll (`None`: drawn from 25 to 55 each time).
    pub wait_secs: Option<u32>,
    /// Longest backoff while the server is away.
    pub backoff_max: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            quiet: Duration::from_millis(300),
            max_delay: Duration::from_secs(2),
            scan_every: Duration::from_secs(60),
            wait_secs: None,
            backoff_max: Duration::from_secs(60),
        }
    }
}

/// What the watcher tells, one line each (the command line prints them as
/// text or JSON lines).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    Started {
        server: String,
        pid: u32,
    },
    Pushed {
        entries: u64,
        sessions: u64,
        journal_lines: u64,
        blobs: u64,
        records: u64,
    },
    Pulled {
        entries: u64,
        sessions: u64,
        blobs: u64,
        records: u64,
        waiting: u64,
    },
    /// The server stopped answering (said once until it is back).
    ServerAway {
        error: String,
    },
    ServerBack {
        away_secs: u64,
    },
    /// The wall clock jumped past the monotonic one: the machine slept.
    Woke {
        slept_secs: u64,
    },
    /// A push or pull failed for another reason than the server being
    /// away; retried at the next scan (said again only if it changes).
    Failed {
        what: &'static str,
        error: String,
    },
    /// A push could not send some items (the rest went).
    NotPushed {
        items: Vec<String>,
    },
}

/// Where the watcher's events go.
pub trait WatchLog: Send + Sync {
    fn log(&self, event: WatchEvent);
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Presence(#[from] PresenceError),
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("cannot watch the eVi home's files: {0}")]
    Files(#[from] notify::Error),
}

/// Messages to the watch loop.
pub enum Signal {
    /// A file under `transcripts/` or `checkpoints/` changed.
    Changed,
    /// Something in the home's own folder changed (a watched folder may
    /// have been created).
    HomeChanged,
    /// Other devices' records are on the server.
    Remote,
    /// The server answers again.
    Back,
    /// The server will not serve this device again (revoked token).
    Fatal(ClientError),
}

/// Whether the server answers, told once each way.
pub struct Health {
    away: Mutex<Option<Instant>>,
    log: Arc<dyn WatchLog>,
    presence: Mutex<Presence>,
}

impl Health {
    /// Notes a failure to reach the server; says so if it is news.
    pub fn failed(&self, error: &str) {
        let mut away = self.away.lock().unwrap_or_else(|p| p.into_inner());
        if away.is_none() {
            *away = Some(Instant::now());
            self.log.log(WatchEvent::ServerAway {
                error: error.to_owned(),
            });
            self.record(|i| i.server_away_since = Some(chrono::Utc::now().to_rfc3339()));
        }
    }

    /// Notes an answer; true (and said) if the server was away.
    pub fn ok(&self) -> bool {
        let mut away = self.away.lock().unwrap_or_else(|p| p.into_inner());
        let Some(since) = away.take() else {
            return false;
        };
        self.log.log(WatchEvent::ServerBack {
            away_secs: since.elapsed().as_secs(),
        });
        self.record(|i| i.server_away_since = None);
        true
    }

    /// Updates what `evi sync status` reads (best effort: a status file
    /// that cannot be written never stops syncing).
    fn record(&self, f: impl FnOnce(&mut presence::WatchInfo)) {
        let mut p = self.presence.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut p.info);
        let _ = p.save();
    }
}

/// Runs until the process is stopped, or the server refuses this device.
pub fn run(home: &EviHome, opts: WatchOptions, log: Arc<dyn WatchLog>) -> Result<(), WatchError> {
    let paths = SyncPaths::new(home);
    let state = SyncState::load(&paths.state()).ctx(|| "cannot read the sync state".into())?;
    let Some(account) = state.account.clone() else {
        // Opening a context says why, with the home's name.
        SyncContext::open(home)?;
        unreachable!("a home without an account does not open");
    };
    let presence = Presence::claim(&paths)?;
    let token = std::fs::read_to_string(paths.token())
        .ctx(|| format!("cannot read the device token {}", paths.token().display()))?;
    let client = Client::for_account(&account.server, Some(token.trim().to_owned()))
        .map_err(SyncError::from)?
        .without_retries();
    let health = Arc::new(Health {
        away: Mutex::new(None),
        log: log.clone(),
        presence: Mutex::new(presence),
    });
    log.log(WatchEvent::Started {
        server: account.server.clone(),
        pid: std::process::id(),
    });
    let (tx, rx) = mpsc::channel();
    let mut files = files::FileWatch::start(home, tx.clone())?;
    let cursor = Arc::new(AtomicU64::new(state.cursor));
    let (pulled_tx, pulled_rx) = mpsc::channel();
    // Moved into the waiting thread once the server first answers.
    let mut pulled_rx = Some(pulled_rx);
    let mut w = Loop {
        home: home.clone(),
        opts: opts.clone(),
        log,
        health: health.clone(),
        cursor: cursor.clone(),
        pulled: pulled_tx,
        backoff: Backoff::new(opts.backoff_max),
        retry_at: None,
        last_failure: None,
    };
    // Catch up first: what changed while no watcher ran, both ways.
    let mut want_push = true;
    let mut want_pull = true;
    let mut scan_push = true;
    let mut burst: Option<(Instant, Instant)> = None;
    let mut next_scan = Instant::now() + opts.scan_every;
    let mut clock = (Instant::now(), SystemTime::now());
    loop {
        let now = Instant::now();
        if pulled_rx.is_some() && w.retry_at.is_none_or(|t| now >= t) {
            // Started once the server answers: its capabilities say
            // whether it has the wait endpoint.
            match client.capabilities() {
                Ok(caps) => {
                    let remote = Remote {
                        client: client.clone(),
                        cursor: cursor.clone(),
                        wait_secs: opts.wait_secs,
                        max_wait_secs: caps.max_wait_secs,
                        backoff: Backoff::new(opts.backoff_max),
                        health: health.clone(),
                        tx: tx.clone(),
                        pulled: pulled_rx.take().expect("checked above"),
                    };
                    std::thread::spawn(move || remote.run());
                }
                Err(e) => w.failed("connect", &SyncError::from(e)),
            }
        }
        let push_due = burst.map(|(first, last)| (last + opts.quiet).min(first + opts.max_delay));
        let mut due = vec![next_scan, now + TICK];
        due.extend(push_due);
        if want_push || want_pull {
            due.push(w.retry_at.unwrap_or(now));
        }
        let mut until = due.into_iter().min().unwrap_or(now);
        // While backing off, nothing is due before the retry (a push due
        // meanwhile would wake the loop again and again for nothing).
        if let Some(retry) = w.retry_at {
            until = until.max(retry);
        }
        match rx.recv_timeout(until.saturating_duration_since(now)) {
            Ok(Signal::Changed) => {
                let t = Instant::now();
                burst = Some(burst.map_or((t, t), |(first, _)| (first, t)));
            }
            Ok(Signal::HomeChanged) => {
                if files.watch_new_dirs()? {
                    want_push = true;
                }
            }
            Ok(Signal::Remote) => want_pull = true,
            Ok(Signal::Back) => {
                w.retry_at = None;
                want_push = true;
                want_pull = true;
            }
            Ok(Signal::Fatal(e)) => return Err(SyncError::from(e).into()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        let now = Instant::now();
        let (mono, wall) = clock;
        clock = (now, SystemTime::now());
        let slept = clock
            .1
            .duration_since(wall)
            .unwrap_or_default()
            .saturating_sub(now - mono);
        if slept > SLEEP_JUMP {
            w.log.log(WatchEvent::Woke {
                slept_secs: slept.as_secs(),
            });
            w.retry_at = None;
            want_push = true;
            want_pull = true;
            scan_push = true;
        }
        if w.retry_at.is_some_and(|t| now < t) {
            continue;
        }
        if now >= next_scan {
            next_scan = now + opts.scan_every;
            want_push = true;
            scan_push = true;
        }
        if push_due.is_some_and(|d| now >= d) {
            burst = None;
            want_push = true;
        }
        if want_push {
            match w.push(scan_push)? {
                Step::Done => {
                    want_push = false;
                    scan_push = false;
                }
                Step::Later => continue,
            }
        }
        if want_pull && w.pull()? == Step::Done {
            want_pull = false;
        }
    }
}

/// How often the loop looks at the clocks (a sleep is noticed within it).
const TICK: Duration = Duration::from_secs(5);
/// A wall-clock jump past the monotonic clock longer than this is a sleep.
const SLEEP_JUMP: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Done,
    /// Failed; `retry_at` says when to try again.
    Later,
}

struct Loop {
    home: EviHome,
    opts: WatchOptions,
    log: Arc<dyn WatchLog>,
    health: Arc<Health>,
    cursor: Arc<AtomicU64>,
    pulled: mpsc::Sender<()>,
    backoff: Backoff,
    retry_at: Option<Instant>,
    last_failure: Option<String>,
}

impl Loop {
    /// Pushes what changed (everything when `scan`, else only if a file,
    /// the journal or what waits says there is something: a look that costs
    /// no request).
    fn push(&mut self, scan: bool) -> Result<Step, WatchError> {
        let step = self.with_context("push", |ctx| {
            if !scan && nothing_to_push(ctx)? {
                return Ok(None);
            }
            super::push::push(ctx, &Quiet).map(Some)
        })?;
        Ok(match step {
            Some(Some(r)) => {
                self.synced();
                if r.entries + r.journal_lines + r.blobs_uploaded + r.segments_stored > 0 {
                    self.log.log(WatchEvent::Pushed {
                        entries: r.entries,
                        sessions: r.sessions,
                        journal_lines: r.journal_lines,
                        blobs: r.blobs_uploaded,
                        records: r.segments_stored,
                    });
                }
                if !r.failed.is_empty() {
                    self.log.log(WatchEvent::NotPushed { items: r.failed });
                }
                Step::Done
            }
            Some(None) => Step::Done,
            None => Step::Later,
        })
    }

    fn pull(&mut self) -> Result<Step, WatchError> {
        let step = self.with_context("pull", |ctx| {
            let r = super::pull::pull(ctx, &Quiet, Default::default())?;
            Ok((r, ctx.state.cursor))
        })?;
        Ok(match step {
            Some((r, cursor)) => {
                self.synced();
                self.cursor.store(cursor, Ordering::Relaxed);
                let _ = self.pulled.send(());
                if r.records + r.entries + r.blobs > 0 {
                    self.log.log(WatchEvent::Pulled {
                        entries: r.entries,
                        sessions: r.sessions,
                        blobs: r.blobs,
                        records: r.records,
                        waiting: r.waiting,
                    });
                }
                Step::Done
            }
            None => Step::Later,
        })
    }

    /// Notes for `evi sync status` that a push or pull went through (a look
    /// that found nothing to push does not count).
    fn synced(&self) {
        self.health
            .record(|i| i.last_sync = Some(chrono::Utc::now().to_rfc3339()));
    }

    /// Runs `f` on a freshly opened context (the sync lock held for `f`
    /// only). `None` when it failed in a way worth retrying, which is then
    /// said and scheduled; `Err` when watching cannot go on.
    fn with_context<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&mut SyncContext) -> Result<T, SyncError>,
    ) -> Result<Option<T>, WatchError> {
        let result = SyncContext::open(&self.home).and_then(|mut ctx| {
            ctx.client = ctx.client.without_retries();
            f(&mut ctx)
        });
        match result {
            Ok(v) => {
                self.backoff.reset();
                self.retry_at = None;
                self.last_failure = None;
                self.health.ok();
                Ok(Some(v))
            }
            Err(e) if fatal(&e) => Err(e.into()),
            Err(e) => {
                self.failed(what, &e);
                Ok(None)
            }
        }
    }

    /// Says a failure (once while the server is away, once per distinct
    /// other error) and schedules the retry.
    fn failed(&mut self, what: &'static str, e: &SyncError) {
        let delay = match e {
            SyncError::Client(c) if c.is_transient() => {
                self.health.failed(&c.to_string());
                self.backoff.next_delay()
            }
            // Another sync holds the lock: soon again, nothing to say.
            SyncError::Lock(_) => Duration::from_millis(500),
            _ => {
                let msg = e.to_string();
                if self.last_failure.as_deref() != Some(msg.as_str()) {
                    self.log.log(WatchEvent::Failed {
                        what,
                        error: msg.clone(),
                    });
                    self.last_failure = Some(msg);
                }
                self.opts.scan_every
            }
        };
        self.retry_at = Some(Instant::now() + delay);
    }
}

/// Errors after which watching cannot go on: the token was revoked, the key
/// is not the account's, the home is not set up any more.
fn fatal(e: &SyncError) -> bool {
    match e {
        SyncError::Client(c) => is_unauthorized(c),
        SyncError::KeyMismatch | SyncError::NotSetUp { .. } | SyncError::Identity(_) => true,
        _ => false,
    }
}

/// Whether a push would find nothing: every transcript file as last
/// pushed, the journal too, no blob owed and nothing waiting. Conservative:
/// anything it cannot tell counts as something.
fn nothing_to_push(ctx: &SyncContext) -> Result<bool, SyncError> {
    if super::push::changed_files(ctx)? > 0 || !ctx.state.missing_blobs.is_empty() {
        return Ok(false);
    }
    let pending = ctx.paths.dir.join("pending");
    if std::fs::read_dir(&pending).is_ok_and(|mut d| d.next().is_some()) {
        return Ok(false);
    }
    let journal = ctx.home.checkpoints_dir().join("journal.jsonl");
    Ok(match super::state::Stat::of(&journal) {
        Ok(st) => st.matches(&ctx.state.journal.file),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    })
}
