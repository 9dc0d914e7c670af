//! The data folder is the server's alone: folders 0700, files 0600, so no
//! other local user reads the argon2 hashes, token hashes or ciphertext.
//! Applied at start to what is there (a folder an older server or an
//! operator left open is closed), and to every folder made later.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Fsyncs a folder, so the names made or renamed in it survive a crash
/// (packs, blobs, a backup archive and a restored folder all rely on it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Creates `dir` (and its missing parents) as 0700, or makes it 0700.
pub fn dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    set_mode(dir, DIR_MODE)
}

/// Creates `file` empty as 0600 if it is missing, or makes it 0600.
pub fn file(file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(file)?;
    set_mode(file, FILE_MODE)
}

/// Closes what a data folder can hold open: the folder, its files (the
/// database and its -wal and -shm, which SQLite made with the umask's
/// mode) and its folders two levels down (`blobs/<user>`, `bodies/<user>`).
/// The blob and pack files inside were always made 0600, so they are not
/// walked (a large server holds millions).
pub fn close_data_folder(root: &Path) -> std::io::Result<()> {
    fn walk(dir: &Path, depth: u32, files_too: bool) -> std::io::Result<()> {
        set_mode(dir, DIR_MODE)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() && depth > 0 {
                walk(&entry.path(), depth - 1, false)?;
            } else if kind.is_file() && files_too {
                set_mode(&entry.path(), FILE_MODE)?;
            }
        }
        Ok(())
    }
    walk(root, 2, true)
}
