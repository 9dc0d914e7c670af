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
pub enum HomeError {
    #[error("cannot find the eVi home: set EVI_HOME or HOME")]
    NoHome,
    /// The path is there but is not a folder (say `EVI_HOME` names the
    /// config file): nothing inside it can be read, and every later message
    /// would blame a file in it.
    #[error("{}", not_a_folder(.path, *.from_evi_home))]
    NotAFolder { path: PathBuf, from_evi_home: bool },
}

fn not_a_folder(path: &Path, from_evi_home: bool) -> String {
    if from_evi_home {
        format!(
            "EVI_HOME points to {}, which is not a folder",
            path.display()
        )
    } else {
        format!("the eVi home {} is not a folder", path.display())
    }
}

impl HomeError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            Self::NoHome => "set EVI_HOME to your eVi home folder (default ~/.evi)",
            Self::NotAFolder {
                from_evi_home: true,
                ..
            } => {
                "point EVI_HOME at the eVi home folder (the one holding config.toml and \
                 transcripts/), or unset it to use ~/.evi"
            }
            Self::NotAFolder { .. } => {
                "move that file away (the eVi home is a folder), or set EVI_HOME to the folder"
            }
        }
    }
}

impl EviHome {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            from_evi_home: false,
        }
    }

    /// `$EVI_HOME` if set and not empty, else `$HOME/.evi`; refused when
    /// something other than a folder is there (a missing one is fine).
    pub fn from_env() -> Result<Self, HomeError> {
        let home = match std::env::var_os("EVI_HOME").filter(|v| !v.is_empty()) {
            Some(p) => Self {
                root: p.into(),
                from_evi_home: true,
            },
            None => std::env::home_dir()
                .map(|h| Self::new(h.join(".evi")))
                .ok_or(HomeError::NoHome)?,
        };
        // `metadata` follows a symbolic link: one to a folder is a folder.
        match std::fs::metadata(&home.root) {
            Ok(m) if !m.is_dir() => Err(HomeError::NotAFolder {
                path: home.root,
                from_evi_home: home.from_evi_home,
            }),
            _ => Ok(home),
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
