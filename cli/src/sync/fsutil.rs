//! Durable, atomic, no-clobber file creation for the sync module.
//!
//! Promise: [`write_new_file`] either leaves `path` absent (on any error, or
//! when `path` already exists) or leaves it holding exactly the bytes written,
//! fsynced, with the requested Unix mode, and the directory entry fsynced too.
//! A reader never sees a partial file, and an existing file is never replaced:
//! the file is written under a temporary name in the same directory, then
//! hard-linked to its final name (`link(2)` fails if the name exists), then the
//! temporary name is removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A temporary file beside its final path, removed on drop unless persisted.
pub(crate) struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    /// Creates `.<name>.tmp-<pid>-<n>` in `dest`'s directory (created if missing).
    pub(crate) fn new_beside(dest: &Path, mode: u32) -> io::Result<Self> {
        let dir = parent_dir(dest);
        fs::create_dir_all(dir)?;
        let name = dest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?
            .to_string_lossy();
        for attempt in 0u32..1000 {
            let tmp = dir.join(format!(
                ".{name}.tmp-{}-{}-{attempt}",
                std::process::id(),
                unique()
            ));
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true);
            set_mode(&mut opts, mode);
            match opts.open(&tmp) {
                Ok(file) => {
                    return Ok(Self {
                        path: tmp,
                        file: Some(file),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not pick a temporary file name",
        ))
    }

    pub(crate) fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("temp file is open until persisted")
    }

    /// Fsyncs the data, links it to `dest` unless `dest` exists, fsyncs the
    /// directory. Returns `AlreadyExists` (and removes the temp file) if
    /// `dest` is taken.
    pub(crate) fn persist_new(mut self, dest: &Path) -> io::Result<()> {
        let file = self.file.take().expect("temp file is open until persisted");
        file.sync_all()?;
        drop(file);
        match fs::hard_link(&self.path, dest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            // Filesystems without hard links: check, then rename. Not atomic
            // against a concurrent creator, but sync holds a per-home lock.
            Err(_) => {
                if fs::symlink_metadata(dest).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "destination exists",
                    ));
                }
                fs::rename(&self.path, dest)?;
            }
        }
        let _ = fs::remove_file(&self.path);
        sync_dir(parent_dir(dest))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Writes `bytes` to a new file at `path` with `mode`; see the module docs.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if fs::symlink_metadata(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "destination exists",
        ));
    }
    let mut tmp = TempFile::new_beside(path, mode)?;
    tmp.file().write_all(bytes)?;
    tmp.persist_new(path)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

#[cfg(unix)]
fn set_mode(opts: &mut OpenOptions, mode: u32) {
    use std::os::unix::fs::OpenOptionsExt;
    opts.mode(mode);
}

#[cfg(not(unix))]
fn set_mode(_opts: &mut OpenOptions, _mode: u32) {}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_and_never_clobbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("f");
        write_new_file(&path, b"one", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        let err = write_new_file(&path, b"two", 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"one");
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f")]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }

    #[test]
    fn dropped_temp_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x");
        {
            let mut t = TempFile::new_beside(&dest, 0o600).unwrap();
            t.file().write_all(b"partial").unwrap();
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
