//! File writes that never leave a partial file behind: data goes to a temp
//! file in the destination's folder (mode 0600: transcripts and keys are the
//! owner's only), is fsynced, then moved into place and the folder fsynced.
//! "New" writes never replace an existing file; "replace" writes swap it
//! atomically. New folders are made durable the same way: fsynced into the
//! folder that holds them.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use tempfile::NamedTempFile;

/// How the name of every temp file [`temp_beside`] makes begins.
const TEMP_PREFIX: &str = ".evi-tmp-";

/// A temp file beside `dest` (its folder created if missing), mode 0600.
pub fn temp_beside(dest: &Path) -> io::Result<NamedTempFile> {
    temp_beside_as(dest, TEMP_PREFIX)
}

/// A temp file beside `dest` whose name begins with `prefix`. A writer that
/// does not hold the lock under which a folder's [`TEMP_PREFIX`] temps are
/// swept (the watcher's status file in `sync/`, beside pushes and pulls)
/// names its temps apart, or a sweep takes one between its write and its
/// rename, and sweeps its own under its own lock.
pub fn temp_beside_as(dest: &Path, prefix: &str) -> io::Result<NamedTempFile> {
    let dir = folder_of(dest);
    fs::create_dir_all(dir)?;
    // tempfile creates files with mode 0600 on Unix.
    tempfile::Builder::new().prefix(prefix).tempfile_in(dir)
}

/// Removes the temp files of [`temp_beside`] directly in `dir` (none if it
/// is missing); how many went. A process killed (SIGKILL, Ctrl-C) between
/// making one and moving it into place leaves it behind for good, so a
/// folder whose writers all hold one lock is swept by the next holder: only
/// call it for such a folder, with that lock held, or it may take a file
/// another process is still writing.
pub fn remove_stale_temps(dir: &Path) -> io::Result<usize> {
    remove_temps_named(dir, TEMP_PREFIX)
}

/// Removes the files directly in `dir` whose names begin with `prefix`
/// (the temps of [`temp_beside_as`]), under the same rule as
/// [`remove_stale_temps`]: only with the lock all their writers hold.
pub fn remove_temps_named(dir: &Path, prefix: &str) -> io::Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for e in entries {
        let e = e?;
        let ours = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(prefix));
        if ours && e.file_type()?.is_file() {
            match fs::remove_file(e.path()) {
                Ok(()) => removed += 1,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
    }
    Ok(removed)
}

/// Fsyncs `tmp` and links it to `dest`; `AlreadyExists` (temp file removed)
/// if `dest` exists.
pub fn persist_new(tmp: NamedTempFile, dest: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(dest).map_err(|e| e.error)?;
    sync_dir(folder_of(dest))
}

/// Creates `path` (and its folders) holding `bytes`; fails if it exists.
pub fn write_new_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = temp_beside(path)?;
    tmp.write_all(bytes)?;
    persist_new(tmp, path)
}

/// Fsyncs `tmp` and moves it over `dest` (created or atomically replaced).
pub fn persist_replace(tmp: NamedTempFile, dest: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(dest).map_err(|e| e.error)?;
    sync_dir(folder_of(dest))
}

/// Atomically replaces `path` (or creates it) with `bytes`.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file_as(path, bytes, TEMP_PREFIX)
}

/// [`replace_file`] through a temp named as [`temp_beside_as`] says.
pub fn replace_file_as(path: &Path, bytes: &[u8], prefix: &str) -> io::Result<()> {
    let mut tmp = temp_beside_as(path, prefix)?;
    tmp.write_all(bytes)?;
    persist_replace(tmp, path)
}

/// Gives `file`, written to replace another, that one's permission bits
/// and, where this process may, its owner: a rewind run with sudo must not
/// leave files owned by root in a user's project. A refused `chown` (not
/// root, and a group this user is not in) leaves the owner as it is.
pub fn set_mode_and_owner(file: &fs::File, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        match std::os::unix::fs::fchown(file, Some(uid), Some(gid)) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
            other => other?,
        }
        // A chown clears set-id bits: put them back.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether an I/O error says the disk is full (`ENOSPC`, or `EDQUOT` of a
/// filesystem quota).
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// Appends `bytes` to `f` (opened for appending, `old_len` bytes long
/// before), all of them or none: a write that fails part-way (a full disk)
/// is cut back to `old_len`, so no partial line stays at the end. Only when
/// the file holds exactly its old bytes and ours: bytes another writer
/// appended meanwhile are never cut.
pub fn append_all_or_none(f: &mut fs::File, old_len: u64, bytes: &[u8]) -> io::Result<()> {
    append_slices_all_or_none(f, old_len, &mut [io::IoSlice::new(bytes)])
}

/// [`append_all_or_none`] of the bytes of `slices` in order, in one
/// `writev` when the file takes them all at once (as one `write` would,
/// the bytes land together at the end of the file).
pub fn append_slices_all_or_none(
    f: &mut fs::File,
    old_len: u64,
    mut slices: &mut [io::IoSlice<'_>],
) -> io::Result<()> {
    let mut written = 0u64;
    io::IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let err = match f.write_vectored(slices) {
            Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
            Ok(n) => {
                written += n as u64;
                io::IoSlice::advance_slices(&mut slices, n);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => e,
        };
        if f.metadata()?.len() == old_len + written {
            f.set_len(old_len)?;
        }
        return Err(err);
    }
    Ok(())
}

/// Creates (or truncates) `path` for writing, the user's alone (0600) when
/// new, as transcripts and keys are.
pub fn create_private(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Makes a rename or create in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Creates `path` and its missing parents, like [`fs::create_dir_all`], and
/// makes each new folder durable by fsyncing the folder it was created in.
/// Without that, a crash can drop a new folder (and every file written in
/// it) even though the files themselves were fsynced; a caller that records
/// progress (a cursor) after writing into new folders must not get ahead of
/// them. A `path` that exists costs one `stat`.
pub fn create_dir_all_durable(path: &Path) -> io::Result<()> {
    // The missing components, deepest first.
    let mut missing = Vec::new();
    let mut cur = path;
    loop {
        match fs::metadata(cur) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a folder", cur.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        missing.push(cur);
        match cur.parent() {
            Some(p) if !p.as_os_str().is_empty() => cur = p,
            _ => break,
        }
    }
    for dir in missing.into_iter().rev() {
        match fs::create_dir(dir) {
            Ok(()) => {}
            // Created meanwhile by another process: its creator syncs it,
            // and syncing the parent again below is harmless.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        sync_dir(folder_of(dir))?;
    }
    Ok(())
}

/// Makes these written files durable together. Many files at once (a pull
/// page of new sessions) take one `syncfs` of the filesystem holding them on
/// Linux: one journal commit instead of one blocking `fsync` each (2,861
/// files cost about 10 s one by one on a virtio disk). A few files, other
/// systems, or files on more than one filesystem are fsynced one by one.
pub fn sync_files(files: Vec<fs::File>) -> io::Result<()> {
    /// Below this many files one by one is as fast and touches only them.
    const BATCH_FROM: usize = 8;
    #[cfg(target_os = "linux")]
    if files.len() >= BATCH_FROM && one_filesystem(&files)? {
        return rustix::fs::syncfs(&files[0]).map_err(io::Error::from);
    }
    for f in files {
        f.sync_all()?;
    }
    Ok(())
}

/// Makes everything written on the filesystem holding `dir` durable: one
/// `syncfs` on Linux, for a caller that wrote many files there and kept no
/// handle on them (see [`sync_files`]). Elsewhere only `dir` itself is
/// synced, and files written in it should be synced by the caller.
pub fn sync_filesystem_of(dir: &Path) -> io::Result<()> {
    let d = fs::File::open(dir)?;
    #[cfg(target_os = "linux")]
    return rustix::fs::syncfs(&d).map_err(io::Error::from);
    #[cfg(not(target_os = "linux"))]
    d.sync_all()
}

/// Starts writing `len` bytes of `f` from `offset` to the disk now, without
/// waiting for them: a hint, for bytes that [`sync_files`] will make durable
/// later. A pull's appends would otherwise sit in the page cache until its
/// `syncfs`, which then writes a whole page's worth while both of its
/// stages wait; started early, the disk writes them while the next sessions
/// are decided and written. Does nothing where it is not known; an error
/// only means the bytes go at `sync_files`, as without it.
pub fn start_writeback(f: &fs::File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (
            libc::off64_t::try_from(offset),
            libc::off64_t::try_from(len),
        ) else {
            return;
        };
        // SAFETY: sync_file_range reads no memory of ours; the descriptor
        // is open for as long as `f` is borrowed.
        #[allow(unsafe_code)]
        unsafe {
            libc::sync_file_range(f.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, offset, len);
}

#[cfg(target_os = "linux")]
fn one_filesystem(files: &[fs::File]) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let first = files[0].metadata()?.dev();
    for f in &files[1..] {
        if f.metadata()?.dev() != first {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_files_are_private_and_never_clobbered() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/key.txt");
        write_new_file(&p, b"one").unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let e = write_new_file(&p, b"two").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"one");
        replace_file(&p, b"three").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        let leftovers = fs::read_dir(p.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temp file left behind");
    }

    #[test]
    fn stale_temps_are_swept_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let left = temp_beside(&dir.path().join("state.json")).unwrap();
        let (_, left) = left.keep().unwrap();
        fs::write(dir.path().join("state.json"), b"{}").unwrap();
        fs::write(dir.path().join(".evi-tmp"), b"not one of ours").unwrap();
        fs::create_dir(dir.path().join(".evi-tmp-folder")).unwrap();
        // A writer outside the sweeping lock names its temps apart: a sweep
        // leaves them to it.
        let apart = temp_beside_as(&dir.path().join("watch.json"), ".evi-watch-tmp-").unwrap();
        assert_eq!(remove_stale_temps(dir.path()).unwrap(), 1);
        assert!(!left.exists());
        assert!(
            apart.path().exists(),
            "the sweep took another writer's temp"
        );
        drop(apart);
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [".evi-tmp", ".evi-tmp-folder", "state.json"]);
        assert_eq!(remove_stale_temps(&dir.path().join("missing")).unwrap(), 0);
    }

    #[test]
    fn durable_dirs_are_created_through_missing_parents() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_all_durable(&deep).unwrap();
        assert!(deep.is_dir());
        // Existing folders are fine; a file in the way is not.
        create_dir_all_durable(&deep).unwrap();
        create_dir_all_durable(dir.path()).unwrap();
        fs::write(dir.path().join("f"), b"").unwrap();
        assert!(create_dir_all_durable(&dir.path().join("f/g")).is_err());
    }
}
