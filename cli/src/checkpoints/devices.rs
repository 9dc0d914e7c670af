//! Other devices' journals, as pull keeps them:
//! `checkpoints/devices/<device name>-<short device id>/journal.jsonl`
//! (a bare device name for journals pushed by older versions). They are
//! history: every line a device ever pushed, rewound ones included, so a
//! seq can appear more than once (a rewind there reuses the numbers).
//!
//! Finding one by the name a user types reads folder names only, and a
//! name is only ever matched against them, so it can never point outside
//! `devices/`.

use std::io;
use std::path::{Path, PathBuf};

/// One pulled journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceJournal {
    /// Its folder's name: `laptop-5zb7x0qa`.
    pub name: String,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("no other device's checkpoints are on this device yet")]
    NoneHere,
    #[error("no pulled journal is from a device called `{name}`; these are: {}", .known.join(", "))]
    Unknown { name: String, known: Vec<String> },
    #[error("`{name}` names {} devices' journals: {}", .matches.len(), .matches.join(", "))]
    Ambiguous { name: String, matches: Vec<String> },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Every pulled journal under `checkpoints`, by name.
pub fn pulled(checkpoints: &Path) -> Result<Vec<DeviceJournal>, DeviceError> {
    let dir = checkpoints.join("devices");
    let io = |source| DeviceError::Io {
        path: dir.clone(),
        source,
    };
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(io)?;
        let path = e.path().join("journal.jsonl");
        if let Some(name) = e.file_name().to_str()
            && path.is_file()
        {
            out.push(DeviceJournal {
                name: name.to_owned(),
                path,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The device part of a journal name: `laptop` of `laptop-5zb7x0qa`.
fn device_part(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((device, id)) if id.len() == 8 && id.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            device
        }
        _ => name,
    }
}

/// The pulled journal `name` means: its folder name exactly, else the one
/// journal of a device of that name, else the one folder name it begins.
pub fn find(checkpoints: &Path, name: &str) -> Result<DeviceJournal, DeviceError> {
    let all = pulled(checkpoints)?;
    if all.is_empty() {
        return Err(DeviceError::NoneHere);
    }
    if let Some(j) = all.iter().find(|j| j.name == name) {
        return Ok(j.clone());
    }
    let pick = |keep: &dyn Fn(&DeviceJournal) -> bool| -> Vec<&DeviceJournal> {
        all.iter().filter(|j| keep(j)).collect()
    };
    for found in [
        pick(&|j| device_part(&j.name) == name),
        pick(&|j| j.name.starts_with(name)),
    ] {
        match found.as_slice() {
            [] => continue,
            [one] => return Ok((*one).clone()),
            many => {
                return Err(DeviceError::Ambiguous {
                    name: name.to_owned(),
                    matches: many.iter().map(|j| j.name.clone()).collect(),
                });
            }
        }
    }
    Err(DeviceError::Unknown {
        name: name.to_owned(),
        known: all.into_iter().map(|j| j.name).collect(),
    })
}

/// The journal to read: this device's (`device` `None`), or the pulled
/// one `device` names; with that one's name.
pub fn journal_path(
    checkpoints: &Path,
    device: Option<&str>,
) -> Result<(PathBuf, Option<String>), DeviceError> {
    match device {
        None => Ok((checkpoints.join("journal.jsonl"), None)),
        Some(name) => find(checkpoints, name).map(|j| (j.path, Some(j.name))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_folder_device_name_or_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        assert!(matches!(find(cp, "laptop"), Err(DeviceError::NoneHere)));
        for name in ["laptop-5zb7x0qa", "laptop-aaaaaaaa", "desk-12345678", "old"] {
            let d = cp.join("devices").join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("journal.jsonl"), b"").unwrap();
        }
        // A folder without a journal is not one.
        std::fs::create_dir_all(cp.join("devices/empty-00000000")).unwrap();
        assert_eq!(find(cp, "desk").unwrap().name, "desk-12345678");
        assert_eq!(find(cp, "laptop-5zb").unwrap().name, "laptop-5zb7x0qa");
        assert_eq!(find(cp, "old").unwrap().name, "old");
        assert!(matches!(
            find(cp, "laptop"),
            Err(DeviceError::Ambiguous { matches, .. }) if matches.len() == 2
        ));
        let err = find(cp, "../../etc").unwrap_err();
        assert!(matches!(err, DeviceError::Unknown { .. }), "{err}");
        assert!(err.to_string().contains("desk-12345678"));
        assert!(matches!(
            find(cp, "empty"),
            Err(DeviceError::Unknown { .. })
        ));
    }
}
