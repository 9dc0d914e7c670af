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
//!   says they committed, and at every scan whatever it said.
//! - A push that fails (over quota, say) is tried again at the next scan
//!   and stops no pull: records of other devices still arrive meanwhile.
//! - A server that does not answer is said once (and once when it is back),
//!   retried with exponential backoff and jitter, and caught up with (push
//!   and pull, at once, whichever side noticed first) when it answers again;
//!   so is a wake from sleep (a jump of the wall clock past the monotonic
//!   one).
//! - A server whose history went back (restored from an older backup) is
//!   said, and mended as `evi sync pull --all` then `push` mend it: what it
//!   holds now is pulled from its first record, and everything here is
//!   pushed again (see [`high_water`](crate::sync::state::high_water)).
//! - A refused token (revoked) is said once; the watcher waits for `evi sync
//!   login` and goes on with the new token ([`health`]). So is a key
//!   rotation on another device: said once, with the pair/join commands;
//!   nothing is asked of the server until `evi sync join` has put the new
//!   key in place, and then watching goes on by itself from the re-joined
//!   state.
//! - Killed at any moment, it leaves what a killed push or pull leaves:
//!   nothing torn, and the next run (or manual sync) goes on from there.
//! - One watcher per home ([`presence`]).

pub mod files;
pub mod health;
pub mod presence;
pub mod remote;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::home::EviHome;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::progress::Quiet;
use crate::sync::remote::client::Client;
use crate::sync::state::context::SyncContext;
use crate::sync::state::{SyncPaths, SyncState};
use health::{Health, LOGIN_POLL, Refusal};
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
    /// The server holds less than this device saw it hold (restored from
    /// an older backup): what went back. The watcher then pulls what it
    /// holds from its first record and pushes everything again.
    ServerWentBack {
        message: String,
    },
    /// Records the server sent that do not verify (said when the list
    /// changes): not applied, fetched again by every pull; the rest went in.
    Damaged {
        records: Vec<String>,
    },
    /// The server refused this device's token: waiting for `evi sync
    /// login` (said once).
    WaitingForLogin {
        error: String,
    },
    /// A new token is in place and the server takes it.
    LoggedIn,
    /// The account's key was rotated on another device: this one must be
    /// paired again (`evi sync join CODE --server {server}`); nothing is
    /// asked of the server until it has (said once).
    KeyRotated {
        error: String,
        server: String,
    },
    /// `evi sync join` put the new key in place and the server takes the
    /// new token: syncing goes on.
    Rejoined,
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
}

/// Runs until the process is stopped, or watching cannot go on (the key is
/// not the account's, the home is not set up any more).
pub fn run(home: &EviHome, opts: WatchOptions, log: Arc<dyn WatchLog>) -> Result<(), WatchError> {
    let paths = SyncPaths::new(home);
    let state = SyncState::load(&paths.state()).ctx(|| "cannot read the sync state".into())?;
    let Some(account) = state.account.clone() else {
        // Opening a context says why, with the home's name.
        SyncContext::open(home)?;
        unreachable!("a home without an account does not open");
    };
    let presence = Presence::claim(&paths)?;
    std::fs::read_to_string(paths.token())
        .ctx(|| format!("cannot read the device token {}", paths.token().display()))?;
    // What the server can do needs no token.
    let client = Client::for_account(&account.server, None)
        .map_err(SyncError::from)?
        .without_retries();
    let health = Arc::new(Health::new(
        log.clone(),
        presence,
        paths.token(),
        account.server.clone(),
    ));
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
        later: BTreeMap::new(),
        last_failure: BTreeMap::new(),
        login: None,
        came_back: false,
        damaged: Vec::new(),
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
        if pulled_rx.is_some() && w.is_ready("connect", now) {
            // Started once the server answers: its capabilities say
            // whether it has the wait endpoint.
            match client.capabilities() {
                Ok(caps) => {
                    let token = health.token().unwrap_or_default();
                    let remote = Remote {
                        client: Client::for_account(&account.server, Some(token.clone()))
                            .map_err(SyncError::from)?
                            .without_retries(),
                        token,
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
        for (wanted, what) in [(want_push, "push"), (want_pull, "pull")] {
            if wanted {
                due.push(w.ready_at(what).unwrap_or(now));
            }
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
        if w.login.is_none() {
            // The thread parked on the server may have heard it first.
            w.login = w.health.still_refused();
        }
        if let Some(used) = &w.login {
            // Waiting for `evi sync login`: nothing to ask the server with
            // the token it refused.
            if w.health.token().as_deref() == Some(used.as_str()) {
                w.retry_at = Some(now + LOGIN_POLL);
                continue;
            }
            w.login = None;
            want_push = true;
            want_pull = true;
        }
        if now >= next_scan {
            // The safety net both ways: a missed file event or long-poll
            // wake delays a line or a record, never loses it.
            next_scan = now + opts.scan_every;
            want_push = true;
            scan_push = true;
            want_pull = true;
        }
        if push_due.is_some_and(|d| now >= d) {
            burst = None;
            want_push = true;
        }
        if want_push && w.is_ready("push", now) {
            match w.push(scan_push)? {
                Step::Done => {
                    want_push = false;
                    scan_push = false;
                }
                // The server is away (or the lock held): the pull would fail
                // too. Any other failure waits for the next scan, the pull
                // goes on.
                Step::Later if w.retry_at.is_some() => continue,
                Step::Later => {}
            }
        }
        if std::mem::take(&mut w.came_back) {
            // Back from away: both ways now, not when the next event or
            // long poll says so.
            want_push = true;
            want_pull = true;
        }
        if want_pull && w.is_ready("pull", now) {
            match w.pull()? {
                Pulled::Done => want_pull = false,
                Pulled::Mended => {
                    // Everything here goes up again.
                    want_pull = false;
                    want_push = true;
                    scan_push = true;
                }
                Pulled::Later => {}
            }
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
    /// Failed; `retry_at` or `later` says when to try again.
    Later,
}

/// How a pull went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pulled {
    Done,
    /// The server's history went back and the pull took it as it now
    /// stands: the push state was reset, everything goes up again.
    Mended,
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
    /// While the server is away or the lock held: nothing is tried before.
    retry_at: Option<Instant>,
    /// Per step (`push`, `pull`) that failed otherwise: not tried again
    /// before (the next scan); the other step goes on.
    later: BTreeMap<&'static str, Instant>,
    /// Per step, the failure last said (said again only if it changes).
    last_failure: BTreeMap<&'static str, String>,
    /// The token the server refused, while waiting for a login.
    login: Option<String>,
    /// The server answered a step after being away.
    came_back: bool,
    /// The damaged records last said.
    damaged: Vec<u64>,
}

impl Loop {
    /// Pushes what changed (everything when `scan`, else only if a file,
    /// the journal or what waits says there is something: a look that costs
    /// no request).
    fn push(&mut self, scan: bool) -> Result<Step, WatchError> {
        let look = |ctx: &mut SyncContext| {
            if !scan && nothing_to_push(ctx)? {
                return Ok(None);
            }
            crate::sync::engine::push::push(ctx, &Quiet).map(Some)
        };
        // A look that found nothing asked the server nothing.
        let step = self.with_context("push", look, Option::is_some)?;
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

    fn pull(&mut self) -> Result<Pulled, WatchError> {
        let pull = |ctx: &mut SyncContext| {
            let r = crate::sync::engine::pull::pull_mending(ctx, &Quiet)?;
            Ok((r, ctx.state.cursor))
        };
        let step = self.with_context("pull", pull, |_| true)?;
        Ok(match step {
            Some((r, cursor)) => {
                self.synced();
                self.cursor.store(cursor, Ordering::Relaxed);
                let _ = self.pulled.send(());
                let mended = r.server_went_back.is_some();
                if let Some(message) = r.server_went_back.clone() {
                    self.log.log(WatchEvent::ServerWentBack { message });
                }
                let damaged: Vec<u64> = r.damaged.iter().map(|d| d.seq).collect();
                if damaged != self.damaged {
                    self.damaged = damaged;
                    let records = r.damaged.iter().map(ToString::to_string).collect();
                    self.log.log(WatchEvent::Damaged { records });
                }
                if r.records + r.entries + r.blobs > 0 {
                    self.log.log(WatchEvent::Pulled {
                        entries: r.entries,
                        sessions: r.sessions,
                        blobs: r.blobs,
                        records: r.records,
                        waiting: r.waiting,
                    });
                }
                if mended { Pulled::Mended } else { Pulled::Done }
            }
            None => Pulled::Later,
        })
    }

    /// Notes for `evi sync status` that a push or pull went through (a look
    /// that found nothing to push does not count).
    fn synced(&self) {
        self.health.synced();
    }

    /// When `what` may be tried again (`None`: now).
    fn ready_at(&self, what: &str) -> Option<Instant> {
        self.retry_at.max(self.later.get(what).copied())
    }

    fn is_ready(&self, what: &str, now: Instant) -> bool {
        self.ready_at(what).is_none_or(|t| now >= t)
    }

    /// Runs `f` on a freshly opened context (the sync lock held for `f`
    /// only). `None` when it failed in a way worth retrying, which is then
    /// said and scheduled; `Err` when watching cannot go on. `answered`
    /// says whether what `f` returned came from the server (only that says
    /// the server is back, or takes the token).
    fn with_context<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&mut SyncContext) -> Result<T, SyncError>,
        answered: impl FnOnce(&T) -> bool,
    ) -> Result<Option<T>, WatchError> {
        // Read before the context reads it: if the server refuses it, this
        // is the token it refused (a login meanwhile writes a newer one).
        let used = self.health.token();
        let sent = Instant::now();
        let result = SyncContext::open(&self.home).and_then(|mut ctx| {
            ctx.client = ctx.client.without_retries();
            f(&mut ctx)
        });
        match result {
            Ok(v) => {
                self.retry_at = None;
                self.later.remove(what);
                self.last_failure.remove(what);
                if answered(&v) {
                    self.backoff.reset();
                    self.health.accepted(sent);
                    if self.health.ok() {
                        self.came_back = true;
                    }
                }
                Ok(Some(v))
            }
            Err(SyncError::Client(c)) if Refusal::of(&c).is_some() => {
                let why = Refusal::of(&c).unwrap_or(Refusal::Revoked);
                if let Some(used) = used
                    && self.health.refused(&used, why, &c)
                {
                    self.login = Some(used);
                }
                self.retry_at = Some(Instant::now() + LOGIN_POLL);
                Ok(None)
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
                if self.last_failure.get(what) != Some(&msg) {
                    self.log.log(WatchEvent::Failed {
                        what,
                        error: msg.clone(),
                    });
                    self.last_failure.insert(what, msg);
                }
                // This step waits for the next scan; the other goes on (and
                // no earlier backoff holds it: this failure is the news).
                self.later
                    .insert(what, Instant::now() + self.opts.scan_every);
                self.retry_at = None;
                return;
            }
        };
        self.retry_at = Some(Instant::now() + delay);
    }
}

/// Errors after which watching cannot go on: the key is not the account's,
/// the home is not set up any more. (A refused token waits for a login.)
fn fatal(e: &SyncError) -> bool {
    matches!(
        e,
        SyncError::KeyMismatch
            | SyncError::NotSetUp { .. }
            | SyncError::Identity(_)
            | SyncError::Config(_)
    )
}

/// Whether a push would find nothing: every transcript file as last
/// pushed, the journal too, no blob owed and nothing waiting. Conservative:
/// anything it cannot tell counts as something.
fn nothing_to_push(ctx: &SyncContext) -> Result<bool, SyncError> {
    if crate::sync::engine::push::changed_files(ctx)? > 0 || !ctx.state.missing_blobs.is_empty() {
        return Ok(false);
    }
    for pending in ["pending", "pending-agents"] {
        let dir = ctx.paths.dir.join(pending);
        if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
            return Ok(false);
        }
    }
    let journal = ctx.home.checkpoints_dir().join("journal.jsonl");
    Ok(match crate::sync::state::Stat::of(&journal) {
        Ok(st) => st.matches(&ctx.state.journal.file),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    })
}
