//! `evi-server admin`: the operator's account tools, run on the server
//! machine against the server's own `--data`, `--database` and `--store`
//! (like `invite`), whether the server runs or not: what each change does
//! is one transaction in the store, which every replica reads on the next
//! request.
//!
//! - list the accounts with their devices, last contact and what they hold;
//! - disable an account (its tokens and logins refused at once, its data
//!   kept) and enable it again;
//! - delete an account and every byte it stored: retired in one
//!   transaction (devices and tokens gone, its name free), then its blobs,
//!   body packs and rows deleted as a key rotation's old account is
//!   ([`crate::rotation::purge`]); a run cut short is finished by the next
//!   one, or by the server's next start.

use std::sync::Arc;

use crate::config::Config;
use crate::store::admin::AccountRow;
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, UserId};
use crate::{AppState, storage};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// As [`crate::InviteError::NoDatabase`]: a mistyped `--data`, most likely.
    #[error("no evi-server database in {} (no {} there)", .0.display(), crate::config::DB_FILE)]
    NoDatabase(std::path::PathBuf),
    #[error("no account {0:?} on this server")]
    NoSuchAccount(String),
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
        let store: Arc<dyn Store> =
            match &config.database {
                Some(url) => Arc::new(PgStore::open(url, 1).await.map_err(anyhow::Error::from)?),
                None => {
                    let db = config.db_path();
                    if !db.is_file() {
                        return Err(AdminError::NoDatabase(
                            std::path::absolute(&config.data_dir)
                                .unwrap_or_else(|_| config.data_dir.clone()),
                        ));
                    }
                    Arc::new(SqliteStore::open(&db).map_err(|e| {
                        anyhow::anyhow!("cannot open database {}: {e}", db.display())
                    })?)
                }
            };
        let (bodies, blobs) = storage::open_stores(&config).await?;
        Ok(Self {
            state: AppState::new(config, store, bodies, blobs),
        })
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
}
