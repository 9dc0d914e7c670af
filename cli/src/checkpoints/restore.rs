//! Putting a checkpoint's bytes back on disk, and taking away a file eVi
//! created.
//!
//! # Promises
//!
//! - A file is written whole or not at all: the bytes go to a temp file in
//!   its folder, are checked against the blob's name (its SHA-256), fsynced,
//!   and renamed over the file; the folder is fsynced after. A file that
//!   existed keeps its permission bits.
//! - Only the one path asked for is touched: nothing is written through a
//!   symbolic link (a link at the path is refused, never replaced or
//!   followed), no folder is created, and a recorded path must be absolute
//!   with no `.` or `..` in it, so a journal line cannot climb elsewhere.
//! - [`Overwrite::Never`] never replaces a file, even one that appears while
//!   the bytes are written (the rename refuses to clobber).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::journal::is_blob_name;
use crate::fsutil::{persist_new, persist_replace, sync_dir};

/// Permission bits of a restored file that did not exist: what eVi's
/// editor would have made under the usual umask.
const NEW_FILE_MODE: u32 = 0o644;

/// Why a file could not be put back. The texts are short reasons, shown as
/// `✗ could not restore (REASON) — PATH`.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("not an absolute path")]
    NotAbsolute,
    #[error("the path has `.` or `..` in it")]
    NotNormal,
    #[error("the journal names no valid blob")]
    NoBlob,
    #[error("eVi created the file: there were no earlier contents")]
    NothingSaved,
    #[error("not snapshotted")]
    NotSnapshotted,
    #[error("eVi wrote it with `{0}`, which this evi does not know how to undo")]
    UnknownOp(String),
    #[error("its checkpoint blob {} is not on this device", short(.0))]
    MissingBlob(String),
    #[error("its checkpoint blob {} is damaged (the bytes do not match its SHA-256)", short(.0))]
    DamagedBlob(String),
    #[error("the file exists (pass --force to replace it)")]
    Exists,
    #[error("it is a symbolic link now; not followed")]
    Symlink,
    #[error("it is a folder now")]
    Folder,
    #[error("there is no folder {}", .0.display())]
    NoFolder(PathBuf),
    #[error("{0}")]
    Io(#[from] io::Error),
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Whether an existing file may be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    Never,
    Replace,
}

/// A path from a journal, checked: absolute, and nothing but names after
/// the root.
pub fn recorded_path(path: &str) -> Result<PathBuf, RestoreError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(RestoreError::NotAbsolute);
    }
    // `Path::components` drops `.` in the middle; the text does not.
    let dotted = path.split('/').any(|c| c == "." || c == "..");
    if dotted
        || p.components()
            .skip(1)
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(RestoreError::NotNormal);
    }
    Ok(p.to_owned())
}

/// Where blob `sha` is kept under `blobs` (`checkpoints/blobs/`).
pub fn blob_path(blobs: &Path, sha: &str) -> Result<PathBuf, RestoreError> {
    if !is_blob_name(sha) {
        return Err(RestoreError::NoBlob);
    }
    Ok(blobs.join(sha))
}

/// What is at `dest` now: a regular file's metadata, or `None` for
/// nothing; a link or a folder is an error.
fn existing(dest: &Path) -> Result<Option<fs::Metadata>, RestoreError> {
    match fs::symlink_metadata(dest) {
        Ok(m) if m.file_type().is_symlink() => Err(RestoreError::Symlink),
        Ok(m) if m.is_dir() => Err(RestoreError::Folder),
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Checks that blob `sha` is here and `dest` could take it, writing
/// nothing (a dry run's question).
pub fn check_write(
    blobs: &Path,
    sha: &str,
    dest: &Path,
    overwrite: Overwrite,
) -> Result<(), RestoreError> {
    let blob = blob_path(blobs, sha)?;
    if !blob.is_file() {
        return Err(RestoreError::MissingBlob(sha.to_owned()));
    }
    folder(dest)?;
    match existing(dest)? {
        Some(_) if overwrite == Overwrite::Never => Err(RestoreError::Exists),
        _ => Ok(()),
    }
}

fn folder(dest: &Path) -> Result<&Path, RestoreError> {
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(RestoreError::NoFolder(dir.to_owned()))
    }
}

/// Writes the bytes of blob `sha` (from `blobs`) to `dest`, atomically;
/// returns their length.
pub fn write_blob(
    blobs: &Path,
    sha: &str,
    dest: &Path,
    overwrite: Overwrite,
) -> Result<u64, RestoreError> {
    let blob = blob_path(blobs, sha)?;
    let mut src = match File::open(&blob) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RestoreError::MissingBlob(sha.to_owned()));
        }
        Err(e) => return Err(e.into()),
    };
    folder(dest)?;
    let (mode, owner) = match existing(dest)? {
        Some(_) if overwrite == Overwrite::Never => return Err(RestoreError::Exists),
        Some(m) => (m.mode() & 0o7777, Some((m.uid(), m.gid()))),
        None => (NEW_FILE_MODE, None),
    };
    let mut tmp = crate::fsutil::temp_beside(dest)?;
    let (size, actual) = copy_hashing(&mut src, tmp.as_file_mut())?;
    if actual != sha {
        return Err(RestoreError::DamagedBlob(sha.to_owned()));
    }
    crate::fsutil::set_mode_and_owner(tmp.as_file(), mode, owner)?;
    match overwrite {
        Overwrite::Never => persist_new(tmp, dest).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => RestoreError::Exists,
            _ => e.into(),
        })?,
        Overwrite::Replace => {
            // A link put there since the check is replaced, never followed:
            // rename works on the name.
            persist_replace(tmp, dest)?;
        }
    }
    Ok(size)
}

/// Copies `src` to `out`, returning the length and the SHA-256 (hex).
fn copy_hashing(src: &mut File, out: &mut File) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// What [`remove_created`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Deleted,
    /// Nothing was there any more.
    AlreadyGone,
}

/// Takes away the file eVi created at `path` (never a link or a folder).
pub fn remove_created(path: &Path) -> Result<Removed, RestoreError> {
    if existing(path)?.is_none() {
        return Ok(Removed::AlreadyGone);
    }
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::AlreadyGone),
        Err(e) => return Err(e.into()),
    }
    sync_dir(folder(path)?)?;
    Ok(Removed::Deleted)
}

/// Checks that [`remove_created`] could take `path` away.
pub fn check_remove(path: &Path) -> Result<Removed, RestoreError> {
    match existing(path)? {
        None => Ok(Removed::AlreadyGone),
        Some(_) => folder(path).map(|_| Removed::Deleted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    #[test]
    fn recorded_paths_must_be_absolute_and_plain() {
        assert!(recorded_path("/home/you/app.py").is_ok());
        for bad in ["app.py", "", "./a"] {
            assert!(matches!(recorded_path(bad), Err(RestoreError::NotAbsolute)));
        }
        for bad in ["/home/../etc/passwd", "/home/./a", "/a/b/.."] {
            assert!(
                matches!(recorded_path(bad), Err(RestoreError::NotNormal)),
                "{bad}"
            );
        }
    }

    #[test]
    fn writes_whole_keeps_mode_and_refuses_links_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        fs::create_dir(&blobs).unwrap();
        let bytes = b"before\n";
        let name = sha(bytes);
        fs::write(blobs.join(&name), bytes).unwrap();

        let dest = dir.path().join("run.sh");
        fs::write(&dest, b"after\n").unwrap();
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o751)).unwrap();
        assert!(matches!(
            write_blob(&blobs, &name, &dest, Overwrite::Never),
            Err(RestoreError::Exists)
        ));
        assert_eq!(
            write_blob(&blobs, &name, &dest, Overwrite::Replace).unwrap(),
            7
        );
        assert_eq!(fs::read(&dest).unwrap(), bytes);
        assert_eq!(fs::metadata(&dest).unwrap().mode() & 0o7777, 0o751);

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&dest, &link).unwrap();
        assert!(matches!(
            write_blob(&blobs, &name, &link, Overwrite::Replace),
            Err(RestoreError::Symlink)
        ));
        assert!(matches!(
            write_blob(
                &blobs,
                &name,
                &dir.path().join("no/such/file"),
                Overwrite::Never
            ),
            Err(RestoreError::NoFolder(_))
        ));

        // A blob whose bytes changed on disk is not written anywhere.
        fs::write(blobs.join(&name), b"rotten").unwrap();
        let fresh = dir.path().join("fresh");
        assert!(matches!(
            write_blob(&blobs, &name, &fresh, Overwrite::Never),
            Err(RestoreError::DamagedBlob(_))
        ));
        assert!(!fresh.exists());
        let missing = sha(b"never stored");
        assert!(matches!(
            write_blob(&blobs, &missing, &fresh, Overwrite::Never),
            Err(RestoreError::MissingBlob(_))
        ));
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".evi-tmp-"))
            .collect();
        assert!(names.is_empty(), "temp files left: {names:?}");
    }

    #[test]
    fn a_restored_file_keeps_its_owner_where_this_process_may_set_it() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"owned\n";
        let name = sha(bytes);
        fs::write(dir.path().join(&name), bytes).unwrap();
        let dest = dir.path().join("theirs.txt");
        fs::write(&dest, b"x").unwrap();
        let me = fs::metadata(&dest).unwrap();
        // Only root can give a file away; anyone else keeps their own.
        let other = if me.uid() == 0 {
            (4321, 4321)
        } else {
            (me.uid(), me.gid())
        };
        std::os::unix::fs::chown(&dest, Some(other.0), Some(other.1)).unwrap();
        write_blob(dir.path(), &name, &dest, Overwrite::Replace).unwrap();
        let m = fs::metadata(&dest).unwrap();
        assert_eq!((m.uid(), m.gid()), other);
        assert_eq!(fs::read(&dest).unwrap(), bytes);
    }

    #[test]
    fn removes_only_plain_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("new.py");
        fs::write(&f, b"x").unwrap();
        assert_eq!(remove_created(&f).unwrap(), Removed::Deleted);
        assert_eq!(remove_created(&f).unwrap(), Removed::AlreadyGone);
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        assert!(matches!(remove_created(&sub), Err(RestoreError::Folder)));
        assert!(sub.is_dir());
    }
}
