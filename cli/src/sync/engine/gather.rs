//! The bytes of one append, gathered for one `writev` instead of copied
//! into one buffer.
//!
//! A pull writes a page's entries in parts of megabytes. Copied into one
//! buffer, each part was a second copy of its lines (a 5 MB tool output
//! held twice) in memory freshly mapped for it: a fresh pull of 300 MB
//! faulted in about 300 MB of new pages only to copy lines into them. Long
//! lines are now written from the entries themselves; short ones are
//! copied into chunks small enough for the allocator to reuse, since a
//! `writev` of one slice per line would cost more than the copy.

use std::io::IoSlice;

/// The bytes of one write of pulled entries: a page is written in parts of
/// about this much, so that the copies of its short lines are held a part
/// at a time, not for the whole page (a page of one long session is tens
/// of MB).
pub(crate) const WRITE_BYTES: usize = 2 << 20;

/// The first part of `entries` to write (about [`WRITE_BYTES`] of lines,
/// at least one entry) and the rest.
pub(crate) fn next_part(
    entries: &[crate::sync::Entry],
) -> (&[crate::sync::Entry], &[crate::sync::Entry]) {
    let mut bytes = 0;
    let end = entries
        .iter()
        .position(|e| {
            bytes += e.line.len();
            bytes > WRITE_BYTES
        })
        .map_or(entries.len(), |i| i.max(1));
    entries.split_at(end)
}

/// Lines at least this long are written from where they are.
const BORROW_FROM: usize = 16 << 10;

/// Bytes of one chunk of short lines: under glibc's mmap threshold (see
/// [`crate::malloc`]), so chunks come from, and go back to, the heap.
const CHUNK: usize = 256 << 10;

/// Slices of one `writev` at most, well under Linux's `IOV_MAX` (1024):
/// past it, lines are copied too.
const MAX_SLICES: usize = 512;

enum Piece<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Borrowed(b) => b,
            Piece::Owned(v) => v,
        }
    }
}

/// Where the last line is, to fingerprint it once the file is written.
#[derive(Clone, Copy)]
enum Last<'a> {
    None,
    Borrowed(&'a [u8]),
    /// In piece `piece`, from `start` to its end, newline excluded.
    InPiece {
        piece: usize,
        start: usize,
    },
}

/// Whole lines, each ending in a newline, in their order.
pub(crate) struct Gathered<'a> {
    pieces: Vec<Piece<'a>>,
    len: usize,
    last: Last<'a>,
}

impl<'a> Gathered<'a> {
    pub fn new() -> Self {
        Self {
            pieces: Vec::new(),
            len: 0,
            last: Last::None,
        }
    }

    /// Adds `line` (no newline in it) and its newline; a long line is not
    /// copied.
    pub fn push_line(&mut self, line: &'a [u8]) {
        if line.len() >= BORROW_FROM && self.pieces.len() + 2 <= MAX_SLICES {
            self.pieces.push(Piece::Borrowed(line));
            // Not copied either: a chunk of its own for one newline was a
            // fresh allocation per long line.
            self.pieces.push(Piece::Borrowed(b"\n"));
            self.last = Last::Borrowed(line);
        } else {
            let start = self.copy(line);
            self.copy(b"\n");
            self.last = Last::InPiece {
                piece: self.pieces.len() - 1,
                start,
            };
        }
        self.len += line.len() + 1;
    }

    /// Adds `bytes`: one whole line and its newline, as built for the file.
    pub fn push_built(&mut self, bytes: Vec<u8>) {
        debug_assert!(bytes.ends_with(b"\n"), "a built line ends in a newline");
        self.len += bytes.len();
        if bytes.len() >= BORROW_FROM && self.pieces.len() < MAX_SLICES {
            self.pieces.push(Piece::Owned(bytes));
            self.last = Last::InPiece {
                piece: self.pieces.len() - 1,
                start: 0,
            };
        } else {
            let start = self.copy(&bytes);
            self.last = Last::InPiece {
                piece: self.pieces.len() - 1,
                start,
            };
        }
    }

    /// Copies `bytes` to the end of the last chunk, or of a new one when it
    /// has no room (a chunk is not grown, which would copy it, until the
    /// slices are at [`MAX_SLICES`]); where they start in it.
    fn copy(&mut self, bytes: &[u8]) -> usize {
        let into_last = match self.pieces.last() {
            Some(Piece::Owned(v)) => {
                v.capacity() - v.len() >= bytes.len() || self.pieces.len() >= MAX_SLICES
            }
            _ => false,
        };
        if !into_last {
            let chunk = Vec::with_capacity(CHUNK.max(bytes.len()));
            self.pieces.push(Piece::Owned(chunk));
        }
        let Some(Piece::Owned(v)) = self.pieces.last_mut() else {
            unreachable!("the last piece is a chunk")
        };
        let start = v.len();
        v.extend_from_slice(bytes);
        start
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The last line, without its newline (empty when there is none).
    pub fn last_line(&self) -> &[u8] {
        match self.last {
            Last::None => &[],
            Last::Borrowed(line) => line,
            Last::InPiece { piece, start } => {
                let b = self.pieces[piece].bytes();
                let end = b[start..].iter().position(|&c| c == b'\n');
                &b[start..start + end.expect("a line ends in a newline")]
            }
        }
    }

    /// The slices of one `writev`, in order.
    pub fn slices(&self) -> Vec<IoSlice<'_>> {
        self.pieces
            .iter()
            .map(|p| IoSlice::new(p.bytes()))
            .collect()
    }

    /// The bytes in one buffer, for a test to compare.
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        self.slices().iter().flat_map(|s| s.to_vec()).collect()
    }

    /// Whether these bytes begin with `prefix`.
    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        if prefix.len() > self.len {
            return false;
        }
        let mut rest = prefix;
        for p in &self.pieces {
            let b = p.bytes();
            let n = b.len().min(rest.len());
            if b[..n] != rest[..n] {
                return false;
            }
            rest = &rest[n..];
            if rest.is_empty() {
                break;
            }
        }
        true
    }

    /// Whether `got` holds exactly these bytes.
    pub fn equals(&self, got: &[u8]) -> bool {
        if got.len() != self.len {
            return false;
        }
        let mut at = 0;
        self.pieces.iter().all(|p| {
            let b = p.bytes();
            let same = got[at..at + b.len()] == *b;
            at += b.len();
            same
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lines_come_out_in_order_with_their_newlines() {
        let long = vec![b'x'; BORROW_FROM + 3];
        let built = {
            let mut b = vec![b'y'; BORROW_FROM * 2];
            b.push(b'\n');
            b
        };
        let mut g = Gathered::new();
        g.push_line(b"{\"a\":1}");
        g.push_line(&long);
        g.push_built(b"{\"id\":\"b\"}\n".to_vec());
        g.push_built(built.clone());
        g.push_line(b"last");
        let mut want = b"{\"a\":1}\n".to_vec();
        want.extend_from_slice(&long);
        want.extend_from_slice(b"\n{\"id\":\"b\"}\n");
        want.extend_from_slice(&built);
        want.extend_from_slice(b"last\n");
        assert_eq!(g.to_vec(), want);
        assert_eq!(g.len(), want.len());
        assert!(g.equals(&want));
        assert!(!g.equals(&want[1..]));
        assert_eq!(g.last_line(), b"last");
        for n in [0, 3, BORROW_FROM + 5, want.len()] {
            assert!(g.starts_with(&want[..n]), "the first {n} bytes");
        }
        let mut other = want[..BORROW_FROM + 5].to_vec();
        other[BORROW_FROM + 4] = b'z';
        assert!(!g.starts_with(&other));
        assert!(!g.starts_with(&[want.as_slice(), b"!"].concat()));
    }

    #[test]
    fn the_last_line_is_found_wherever_it_went() {
        let long = vec![b'z'; BORROW_FROM];
        let mut g = Gathered::new();
        g.push_line(b"a");
        g.push_line(&long);
        assert_eq!(g.last_line(), &long[..]);
        g.push_built(b"{\"id\":\"c\"}\n".to_vec());
        assert_eq!(g.last_line(), b"{\"id\":\"c\"}");
        assert_eq!(Gathered::new().last_line(), b"");
    }

    #[test]
    fn many_long_lines_stay_within_one_writev() {
        let long = vec![b'q'; BORROW_FROM];
        let mut g = Gathered::new();
        for _ in 0..2000 {
            g.push_line(&long);
        }
        assert!(g.slices().len() <= MAX_SLICES + 1);
        assert_eq!(g.len(), 2000 * (BORROW_FROM + 1));
        assert_eq!(g.to_vec().len(), g.len());
    }

    #[test]
    fn a_short_line_longer_than_the_room_left_starts_a_chunk() {
        let mut g = Gathered::new();
        let a = vec![b'a'; CHUNK - 10];
        g.push_built({
            let mut v = a.clone();
            v.push(b'\n');
            v
        });
        g.push_line(b"0123456789abcdef");
        let mut want = a;
        want.push(b'\n');
        want.extend_from_slice(b"0123456789abcdef\n");
        assert_eq!(g.to_vec(), want);
        assert_eq!(g.last_line(), b"0123456789abcdef");
    }
}
