//! Everything a sync command works with, opened once: the home, the lock,
//! the identity and its keys, the account and its client, the state.

use std::time::Duration;

use super::client::Client;
use super::error::{IoContext, SyncError};
use super::journal::PulledJournals;
use super::lock::SyncLock;
use super::state::{Account, SyncPaths, SyncState};
use super::{Identity, SyncKeys};
use crate::home::EviHome;

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
        let keys = SyncKeys::derive(&identity);
        let client = Client::for_account(&account.server, Some(token.trim().to_owned()))?;
        Ok(Self {
            home: home.clone(),
            paths,
            identity,
            keys,
            account,
            client,
            state,
            journals: PulledJournals::default(),
            _lock: lock,
        })
    }

    pub fn save_state(&self) -> Result<(), SyncError> {
        self.state
            .save(&self.paths.state())
            .ctx(|| "cannot save the sync state".into())
    }
}

fn not_set_up(home: &EviHome) -> SyncError {
    SyncError::NotSetUp {
        home: home.root().to_owned(),
        note: home.absent().map(|a| format!(": {a}")).unwrap_or_default(),
    }
}
