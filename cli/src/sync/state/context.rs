//! Everything a sync command works with, opened once: the home, the lock,
//! the identity and its keys, the account and its client, the state.

use std::sync::Arc;
use std::time::Duration;

use crate::home::EviHome;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::remote::client::Client;
use crate::sync::state::append_marks::AppendMarks;
use crate::sync::state::lock::SyncLock;
use crate::sync::state::pulled_journals::PulledJournals;
use crate::sync::state::{Account, SyncPaths, SyncState};
use crate::sync::{Identity, SyncKeys};

pub struct SyncContext {
    pub home: EviHome,
    pub paths: SyncPaths,
    pub identity: Identity,
    pub keys: SyncKeys,
    pub account: Account,
    pub client: Client,
    pub state: SyncState,
    /// Pulled journals as read by this command (see [`PulledJournals`]).
    pub journals: PulledJournals,
    /// The appends to transcripts under way (see [`AppendMarks`]), and what
    /// an earlier, killed command left cut.
    pub marks: Arc<AppendMarks>,
    /// Other agents' folders that `[agents]` turns on (see
    /// [`crate::source`]), and where their projects are here.
    pub sources: Vec<crate::source::Source>,
    pub path_map: crate::source::paths::PathMap,
    /// `sync/projects.json`: the git remotes of those sessions' projects,
    /// and where this device placed sessions by them.
    pub projects: crate::source::project::Projects,
    /// This device's checkouts by remote, looked for on the first session
    /// that needs one (once per command).
    pub checkouts: Option<crate::source::checkouts::Checkouts>,
    /// `[paths] search`, `~` expanded.
    pub search: Vec<std::path::PathBuf>,
    /// The redaction rules `[sync]` turns on (`None`: `redact = false`).
    pub redactor: Option<std::sync::Arc<crate::sync::engine::redact::Redactor>>,
    /// `[checkpoints] keep_days`: push forgets older journal lines.
    pub checkpoint_keep_days: Option<u32>,
    /// What this command's pull learned of the agent files it appended to
    /// (see [`crate::source::apply::SeenFiles`]).
    pub seen_files: crate::source::apply::SeenFiles,
    _lock: SyncLock,
}

/// How long a second sync command waits for the first.
pub fn lock_wait() -> Duration {
    let secs = std::env::var("EVI_SYNC_LOCK_WAIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10.0_f64);
    Duration::from_secs_f64(secs)
}

impl SyncContext {
    /// Opens a home set up with `evi sync init` or `login`, taking the lock.
    pub fn open(home: &EviHome) -> Result<Self, SyncError> {
        let paths = SyncPaths::new(home);
        // Before the lock, which would create `sync/`: a home that is not set
        // up stays as it is.
        if !paths.state().is_file() {
            return Err(not_set_up(home));
        }
        let lock = SyncLock::acquire(&paths.lock(), lock_wait())?;
        let state = SyncState::load(&paths.state()).ctx(|| "cannot read the sync state".into())?;
        let account = state.account.clone().ok_or_else(|| not_set_up(home))?;
        let token = std::fs::read_to_string(paths.token())
            .ctx(|| format!("cannot read the device token {}", paths.token().display()))?;
        let identity = Identity::load(&paths.identity())?;
        // After the identity loaded: `key import`, which takes no lock,
        // writes into `sync/` only in a home that has none.
        sweep_stale_temps(home, &paths);
        let marks = AppendMarks::open(&paths.dir, &home.transcripts_dir())
            .ctx(|| "cannot read sync/appending".into())?;
        let keys = SyncKeys::derive(&identity);
        // The commands read (and report on) the config before this; a
        // config they could not read leaves the other agents out.
        let config = crate::config::Config::load(&home.config_file())
            .map(|l| l.config)
            .unwrap_or_default();
        let client = Client::for_account(&account.server, Some(token.trim().to_owned()))?
            .with_key_proof(&keys);
        let projects = crate::source::project::Projects::load(&paths.dir);
        let redactor = crate::sync::engine::redact::Redactor::configured(
            config.sync.redact,
            &config.sync.redact_rules,
        )
        .map_err(|e| SyncError::Config(e.to_string()))?
        .map(std::sync::Arc::new);
        Ok(Self {
            home: home.clone(),
            paths,
            identity,
            keys,
            account,
            client,
            state,
            journals: PulledJournals::default(),
            marks: Arc::new(marks),
            sources: crate::source::enabled(&config),
            path_map: crate::source::paths::PathMap::new(&config.paths.map),
            projects,
            checkouts: None,
            search: config
                .paths
                .search
                .iter()
                .map(|s| crate::source::paths::expand_home(s))
                .collect(),
            redactor,
            checkpoint_keep_days: config.checkpoints.keep_days,
            seen_files: Default::default(),
            _lock: lock,
        })
    }

    /// Refuses to go on under a key the account was not set up with:
    /// [`SyncError::KeyMismatch`] when the account's key check value is not
    /// this identity's. Push checks before anything goes up, pull and verify
    /// before anything is opened: under another key every record fails to
    /// open, which is this, not damage (and learns early that a token was
    /// revoked). An account without a key check value passes.
    ///
    /// An account whose key check value is this identity's but that holds
    /// no key proof yet (made before proofs) is given this key's here, once:
    /// from then on the server takes forgets and rotations only from a
    /// holder of the key (see `seal::keys`).
    pub fn check_key(&self) -> Result<(), SyncError> {
        let state = self.client.key_check_state()?;
        match state.key_check.map(|b| b.0) {
            Some(kcv) if !self.keys.matches_key_check(&kcv) => Err(SyncError::KeyMismatch),
            Some(_) if !state.key_proof => {
                // Another device may set the same proof meanwhile (fine);
                // a proof set by another key is for `login` to replace.
                match self.client.set_key_check(&self.keys, None) {
                    Err(crate::sync::remote::client::ClientError::Api {
                        code: evi_shared::api::ErrorCode::KeyProofMismatch,
                        ..
                    })
                    | Ok(()) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            _ => Ok(()),
        }
    }

    pub fn save_state(&self) -> Result<(), SyncError> {
        self.projects
            .save(&self.paths.dir)
            .ctx(|| "cannot save sync/projects.json".into())?;
        self.state
            .save(&self.paths.state())
            .ctx(|| "cannot save the sync state".into())
    }
}

/// Clears what a sync killed mid-write left: the temp files of a state,
/// pending or blob write that never moved into place (a pull killed while
/// fetching blobs leaves one per blob in flight). Only sync commands,
/// holding the lock, write temps in these folders (and `key import`, see
/// the caller). Best effort: a temp file that cannot be removed only takes
/// room, so it never stops a sync.
fn sweep_stale_temps(home: &EviHome, paths: &SyncPaths) {
    let blobs = home.checkpoints_dir().join("blobs");
    let pending = [paths.dir.join("pending"), paths.dir.join("pending-agents")];
    for dir in [paths.dir.clone(), blobs].into_iter().chain(pending) {
        let _ = crate::fsutil::remove_stale_temps(&dir);
    }
}

fn not_set_up(home: &EviHome) -> SyncError {
    SyncError::NotSetUp {
        home: home.root().to_owned(),
        note: home.absent().map(|a| format!(": {a}")).unwrap_or_default(),
    }
}
