//! `evi-server admin`: the operator's account tools, run on the server
//! machine against the server's own `--data`, `--database` and `--store`
//! (like `invite`), whether the server runs or not: what each change does
//! is one transaction in the store, which every replica reads on the next
//! request.
//!
//! - list the accounts with their devices, last contact and what they hold;
//! - disable an account (its tokens and logins refused at once, its data
//!   kept) and enable it again;
//! - give an account its own quota (or none), beside the server's
//!   `--quota-bytes`; it holds from its next request, on every replica;
//! - list the invites, and expire or revoke unused ones;
//! - read and set the registration mode, which every replica reads at
//!   each registration;
//! - delete an account and every byte it stored: retired in one
//!   transaction (devices and tokens gone, its name free), then its blobs,
//!   body packs and rows deleted as a key rotation's old account is
//!   ([`crate::rotation::purge`]); a run cut short is finished by the next
//!   one, or by the server's next start.

use evi_shared::api::Registration;

use crate::config::Config;
use crate::store::UserId;
use crate::store::admin::{AccountRow, InviteRow};
use crate::{AppState, storage};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// As [`crate::InviteError::NoDatabase`]: a mistyped `--data`, most likely.
    #[error("no evi-server database in {} (no {} there)", .0.display(), crate::config::DB_FILE)]
    NoDatabase(std::path::PathBuf),
    #[error("no account {0:?} on this server")]
    NoSuchAccount(String),
    #[error("no unused invite {0:?} on this server")]
    NoSuchInvite(String),
    /// An invite id (its hash's first hex digits) that several share.
    #[error("{0:?} names {1} invites: give more of its digits")]
    AmbiguousInvite(String, usize),
    /// Some files or rows could not be deleted yet (the store did not
    /// answer); the account is retired and nothing reads it.
    #[error("the account is deleted for its devices, but some of its data is left: {0}")]
    Unfinished(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The server's stores, opened for the operator.
pub struct Admin {
    state: AppState,
}

impl Admin {
    /// Opens the store the server runs on (never creating a database) and
    /// its body and blob stores. Takes no data-folder lock: the server may
    /// be running.
    pub async fn open(config: Config) -> Result<Self, AdminError> {
        let store = crate::open_existing_store(&config)
            .await
            .map_err(|e| match e {
                crate::InviteError::NoDatabase { folder } => AdminError::NoDatabase(folder),
                crate::InviteError::Other(e) => AdminError::Other(e),
                e => AdminError::Other(e.into()),
            })?;
        let stores = storage::open_stores(&config).await?;
        Ok(Self {
            state: AppState::new(config, store, stores.bodies, stores.blobs),
        })
    }

    /// The server's `--quota-bytes` as given to this command (from the
    /// same environment as the server's, when the unit's is used).
    pub fn default_quota(&self) -> Option<u64> {
        self.state.config.quota_bytes
    }

    pub async fn accounts(&self) -> Result<Vec<AccountRow>, AdminError> {
        Ok(self
            .state
            .store
            .accounts()
            .await
            .map_err(anyhow::Error::from)?)
    }

    /// The account `name` names (in any case, as a login does).
    async fn find(&self, name: &str) -> Result<UserId, AdminError> {
        let creds = self
            .state
            .store
            .credentials(name)
            .await
            .map_err(anyhow::Error::from)?;
        creds
            .filter(|c| !c.name.starts_with('~'))
            .map(|c| c.user_id)
            .ok_or_else(|| AdminError::NoSuchAccount(name.to_owned()))
    }

    /// Disables (`true`) or enables the account: its exact name.
    pub async fn set_disabled(&self, name: &str, disabled: bool) -> Result<String, AdminError> {
        let user = self.find(name).await?;
        let at = disabled.then(|| chrono::Utc::now().timestamp());
        let store = &self.state.store;
        if !store
            .set_disabled(user, at)
            .await
            .map_err(anyhow::Error::from)?
        {
            return Err(AdminError::NoSuchAccount(name.to_owned()));
        }
        self.name_of(user, name).await
    }

    async fn name_of(&self, user: UserId, asked: &str) -> Result<String, AdminError> {
        Ok(self
            .accounts()
            .await?
            .into_iter()
            .find(|a| a.id == user)
            .map_or_else(|| asked.to_owned(), |a| a.name))
    }

    /// Deletes the account and every byte it stored; what it held.
    pub async fn delete(&self, name: &str) -> Result<AccountRow, AdminError> {
        let user = self.find(name).await?;
        let row = self
            .accounts()
            .await?
            .into_iter()
            .find(|a| a.id == user)
            .ok_or_else(|| AdminError::NoSuchAccount(name.to_owned()))?;
        let now = chrono::Utc::now().timestamp();
        let store = &self.state.store;
        if !store
            .retire_account(user, now)
            .await
            .map_err(anyhow::Error::from)?
        {
            return Err(AdminError::NoSuchAccount(name.to_owned()));
        }
        crate::rotation::purge(&self.state).await;
        let left = store.retired_users().await.map_err(anyhow::Error::from)?;
        if left.contains(&user) {
            return Err(AdminError::Unfinished(
                "run the same command again (or restart the server, which finishes it)".into(),
            ));
        }
        Ok(row)
    }

    /// Sets the account's own quota: `None` for the server's default,
    /// [`crate::store::admin::NO_QUOTA`] for none. Its exact name.
    pub async fn set_quota(&self, name: &str, quota: Option<i64>) -> Result<String, AdminError> {
        let user = self.find(name).await?;
        if !self
            .state
            .store
            .set_quota(user, quota)
            .await
            .map_err(anyhow::Error::from)?
        {
            return Err(AdminError::NoSuchAccount(name.to_owned()));
        }
        self.name_of(user, name).await
    }

    pub async fn invites(&self) -> Result<Vec<InviteRow>, AdminError> {
        Ok(self
            .state
            .store
            .invites()
            .await
            .map_err(anyhow::Error::from)?)
    }

    /// The unused invite whose id (hash digits, see [`invite_id`]) starts
    /// with `id`.
    async fn find_invite(&self, id: &str) -> Result<Vec<u8>, AdminError> {
        let id = id.trim().to_ascii_lowercase();
        if id.len() < 4 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(AdminError::NoSuchInvite(id));
        }
        let found: Vec<_> = self
            .invites()
            .await?
            .into_iter()
            .filter(|i| i.used_by.is_none() && hex::encode(&i.code_hash).starts_with(&id))
            .collect();
        match found.as_slice() {
            [one] => Ok(one.code_hash.clone()),
            [] => Err(AdminError::NoSuchInvite(id)),
            many => Err(AdminError::AmbiguousInvite(id, many.len())),
        }
    }

    /// Makes the unused invite `id` stop working at `at`.
    pub async fn expire_invite(&self, id: &str, at: i64) -> Result<(), AdminError> {
        let hash = self.find_invite(id).await?;
        if !self
            .state
            .store
            .expire_invite(hash, at)
            .await
            .map_err(anyhow::Error::from)?
        {
            return Err(AdminError::NoSuchInvite(id.to_owned()));
        }
        Ok(())
    }

    /// Deletes the unused invite `id`: its code registers nobody.
    pub async fn revoke_invite(&self, id: &str) -> Result<(), AdminError> {
        let hash = self.find_invite(id).await?;
        if !self
            .state
            .store
            .revoke_invite(hash)
            .await
            .map_err(anyhow::Error::from)?
        {
            return Err(AdminError::NoSuchInvite(id.to_owned()));
        }
        Ok(())
    }

    /// The registration mode every replica reads now.
    pub async fn registration(&self) -> Result<Registration, AdminError> {
        Ok(self
            .state
            .registration()
            .await
            .map_err(anyhow::Error::from)?)
    }

    pub async fn set_registration(&self, mode: Registration) -> Result<(), AdminError> {
        Ok(self
            .state
            .store
            .set_registration(mode)
            .await
            .map_err(anyhow::Error::from)?)
    }
}

/// How the operator names an invite: the first 12 hex digits of its
/// code's SHA-256 (the code itself is not stored; the digits say nothing
/// about it).
pub fn invite_id(code_hash: &[u8]) -> String {
    let mut id = hex::encode(code_hash);
    id.truncate(12);
    id
}
