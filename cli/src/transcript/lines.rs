//! Streaming a session's lines with bounded memory.
//!
//! Files are read in day order, each line by line through one reused buffer,
//! so a 1 GB session needs only as much memory as its longest line. A tail
//! without a final `\n` is pending (eVi may still be writing it), and is not
//! an entry yet.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::ControlFlow;

use super::catalog::SessionFile;
use super::line::is_blank;

const BUF: usize = 256 * 1024;

/// Where a complete line lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineAt {
    /// Index into the session's files.
    pub file: usize,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Length without the `\n`.
    pub len: u64,
}

/// What a walk over the lines found besides them.
#[derive(Debug, Default, Clone, Copy)]
pub struct WalkEnd {
    /// Bytes after the last `\n` of any file (a line being written).
    pub pending_bytes: u64,
}

/// Calls `f` with every complete, non-blank line (without `\n`), in reading
/// order, until it breaks.
pub fn walk(
    files: &[SessionFile],
    mut f: impl FnMut(LineAt, &[u8]) -> ControlFlow<()>,
) -> io::Result<WalkEnd> {
    let mut end = WalkEnd::default();
    let mut buf = Vec::with_capacity(4096);
    for (i, file) in files.iter().enumerate() {
        let mut r = BufReader::with_capacity(BUF, File::open(&file.path)?);
        let mut offset = 0u64;
        loop {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') {
                end.pending_bytes += n as u64;
                break;
            }
            let line = &buf[..n - 1];
            if !is_blank(line) {
                let at = LineAt {
                    file: i,
                    offset,
                    len: line.len() as u64,
                };
                if f(at, line).is_break() {
                    return Ok(end);
                }
            }
            offset += n as u64;
        }
    }
    Ok(end)
}

/// Reads lines back by position, keeping the last file open: readers index a
/// session in one pass, then fetch only the lines they show.
pub struct LineFetcher<'a> {
    files: &'a [SessionFile],
    open: Option<(usize, File)>,
}

impl<'a> LineFetcher<'a> {
    pub fn new(files: &'a [SessionFile]) -> Self {
        Self { files, open: None }
    }

    pub fn fetch(&mut self, at: LineAt) -> io::Result<Vec<u8>> {
        if self.open.as_ref().map(|(i, _)| *i) != Some(at.file) {
            self.open = Some((at.file, File::open(&self.files[at.file].path)?));
        }
        let (_, file) = self.open.as_mut().expect("opened above");
        file.seek(SeekFrom::Start(at.offset))?;
        let mut out = vec![0; at.len as usize];
        file.read_exact(&mut out)?;
        Ok(out)
    }
}
