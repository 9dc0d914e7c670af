//! The eVi home: `$EVI_HOME`, else `~/.evi`, and the paths inside it.
//! Finding it creates nothing: read-only commands leave a home that does not
//! exist as it is (and say so, through [`EviHome::absent`]).

use std::path::{Path, PathBuf};

/// The root of an eVi home and the well-known paths in it.
#[derive(Debug, Clone)]
pub struct EviHome {
    root: PathBuf,
    /// Whether the root came from `$EVI_HOME` (for messages about it).
    from_evi_home: bool,
}

/// Why no home could be found.
#[derive(Debug, thiserror::Error)]
#[error("cannot find the eVi home: set EVI_HOME or HOME")]
pub struct NoHome;

impl EviHome {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            from_evi_home: false,
        }
    }

    /// `$EVI_HOME` if set and not empty, else `$HOME/.evi`.
    pub fn from_env() -> Result<Self, NoHome> {
        match std::env::var_os("EVI_HOME").filter(|v| !v.is_empty()) {
            Some(p) => Ok(Self {
                root: p.into(),
                from_evi_home: true,
            }),
            None => std::env::home_dir()
                .map(|h| Self::new(h.join(".evi")))
                .ok_or(NoHome),
        }
    }

    /// When the home's folder does not exist, says so (and that `EVI_HOME`
    /// points there, when it does), for a message naming the home.
    pub fn absent(&self) -> Option<&'static str> {
        if self.root.is_dir() {
            None
        } else if self.from_evi_home {
            Some("EVI_HOME points to a folder that does not exist")
        } else {
            Some("the folder does not exist")
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
