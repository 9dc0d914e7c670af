//! Streaming a session's lines with bounded memory.
//!
//! Files are read in day order, each line by line through one reused buffer,
//! so a 1 GB session needs only as much memory as its longest line. A tail
//! without a final `\n` is pending (eVi may still be writing it), and is not
//! an entry yet.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;

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
    for (i, file) in files.iter().enumerate() {
        let fe = walk_file(&file.path, 0, |offset, line| {
            let at = LineAt {
                file: i,
                offset,
                len: line.len() as u64,
            };
            f(at, line)
        })?;
        end.pending_bytes += fe.pending_bytes;
        if fe.stopped {
            break;
        }
    }
    Ok(end)
}

/// Where a walk over one file stopped.
#[derive(Debug, Default, Clone, Copy)]
pub struct FileEnd {
    /// Offset just past the last complete line read.
    pub offset: u64,
    pub pending_bytes: u64,
    /// The callback broke the walk.
    pub stopped: bool,
}

/// Calls `f(offset, line)` with every complete, non-blank line of one file
/// from byte `start` on.
pub fn walk_file(
    path: &Path,
    start: u64,
    f: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> io::Result<FileEnd> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    walk_reader(BufReader::with_capacity(BUF, file), start, f)
}

/// [`walk_file`] over any reader positioned at byte `start` of a file.
pub fn walk_reader(
    mut r: impl BufRead,
    start: u64,
    mut f: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> io::Result<FileEnd> {
    let mut buf = Vec::with_capacity(4096);
    let mut end = FileEnd {
        offset: start,
        ..FileEnd::default()
    };
    loop {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(end);
        }
        if buf.last() != Some(&b'\n') {
            end.pending_bytes = n as u64;
            return Ok(end);
        }
        let line = &buf[..n - 1];
        let offset = end.offset;
        end.offset += n as u64;
        if !is_blank(line) && f(offset, line).is_break() {
            end.stopped = true;
            return Ok(end);
        }
    }
}

/// Reads lines back by position through one buffered reader per file,
/// keeping the last file open: readers index a session in one pass, then fetch
/// only the lines they show. They mostly ask for lines in file order, so a
/// fetch is usually served from the buffer rather than a seek and a read
/// system call per line.
pub struct LineFetcher<'a> {
    files: &'a [SessionFile],
    /// Index of the open file, its reader, and the reader's position.
    open: Option<(usize, BufReader<File>, u64)>,
}

/// Read-ahead of [`LineFetcher`]: a few average lines, small next to the
/// limit on a reader's memory.
const FETCH_BUF: usize = 64 * 1024;

impl<'a> LineFetcher<'a> {
    pub fn new(files: &'a [SessionFile]) -> Self {
        Self { files, open: None }
    }

    pub fn fetch(&mut self, at: LineAt) -> io::Result<Vec<u8>> {
        if self.open.as_ref().map(|(i, _, _)| *i) != Some(at.file) {
            let file = File::open(&self.files[at.file].path)?;
            self.open = Some((at.file, BufReader::with_capacity(FETCH_BUF, file), 0));
        }
        let (_, r, pos) = self.open.as_mut().expect("opened above");
        let read = read_at(r, pos, at);
        if read.is_err() {
            // The reader's position is unknown after a failed seek or read.
            self.open = None;
        }
        read
    }
}

fn read_at(r: &mut BufReader<File>, pos: &mut u64, at: LineAt) -> io::Result<Vec<u8>> {
    if at.offset != *pos {
        // Within the buffer this only moves the cursor; offsets are far
        // below 2^63, so the wrapping difference is the signed distance.
        r.seek_relative(at.offset.wrapping_sub(*pos) as i64)?;
        *pos = at.offset;
    }
    let mut out = vec![0; at.len as usize];
    r.read_exact(&mut out)?;
    *pos += at.len;
    Ok(out)
}
