//! The eVi home: `$EVI_HOME`, else `~/.evi`, and the paths inside it.

use std::path::{Path, PathBuf};

/// The root of an eVi home and the well-known paths in it.
#[derive(Debug, Clone)]
pub struct EviHome {
    root: PathBuf,
}

/// Why no home could be found.
#[derive(Debug, thiserror::Error)]
#[error("cannot find the eVi home: set EVI_HOME or HOME")]
pub struct NoHome;

impl EviHome {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$EVI_HOME` if set and not empty, else `$HOME/.evi`.
    pub fn from_env() -> Result<Self, NoHome> {
        match std::env::var_os("EVI_HOME").filter(|v| !v.is_empty()) {
            Some(p) => Ok(Self::new(p)),
            None => std::env::home_dir()
                .map(|h| Self::new(h.join(".evi")))
                .ok_or(NoHome),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn transcripts_dir(&self) -> PathBuf {
        self.root.join("transcripts")
    }
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    /// Owned by this project: identity, sync state, lock.
    pub fn sync_dir(&self) -> PathBuf {
        self.root.join("sync")
    }
}
