//! File writes that never leave a partial file behind and never replace a
//! file that exists: write a temp file in the same folder, fsync, then link
//! it into place (mode 0600: transcripts and keys are the owner's only).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Creates `path` (and its folders) with `bytes`, mode 0600; fails if it exists.
pub fn write_new_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent folder"))?;
    fs::create_dir_all(dir)?;
    // tempfile creates files with mode 0600 on Unix.
    let mut tmp = tempfile::Builder::new()
        .prefix(".evi-tmp-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Makes a rename or create in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
