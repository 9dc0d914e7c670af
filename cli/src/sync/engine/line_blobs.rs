//! Transcript lines too large for a segment travel as blobs.
//!
//! # Promises
//!
//! A line longer than a segment may hold (a pasted image, a huge tool
//! result) is uploaded as a blob named by the SHA-256 of its bytes, through
//! the same keyed names and age files as checkpoint blobs, and the segment
//! carries only its length and hash ([`LineBlob`]). The blob is on the server
//! before the segment that names it, so no device ever pulls a reference it
//! cannot resolve, unless the server lost it. Pull fetches the blob, checks
//! its hash and length, and only then hands the line to the appender; a blob
//! the server does not have leaves the entry waiting (`sync/pending/`) and is
//! asked for again by every later sync. Lines never land in
//! `checkpoints/blobs/`: their temp files live in `sync/` and are removed.

use std::io::Read;

use sha2::{Digest, Sha256};

use crate::sync::Entry;
use crate::sync::engine::blobs;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::remote::blob_transfer::BlobTransfer;
use crate::sync::seal::segment::LineBlob;
use crate::sync::state::context::SyncContext;

/// The reference a segment carries instead of `line`, once the line is up
/// as a blob (see [`send_lines`]).
pub(crate) fn line_blob_of(line: &[u8]) -> LineBlob {
    LineBlob {
        sha256_hex: hex::encode(Sha256::digest(line)),
        len: line.len() as u64,
    }
}

/// Uploads the lines of `entries` that travel as blobs and still have their
/// bytes in hand (a `line_blob` beside a non-empty `line`, as the push
/// gathers them), then drops those bytes; the number uploaded (or already
/// on the server). Runs on the thread that seals the entries, just before
/// it does: the blob is on the server before the segment naming it is
/// even sealed, and reading the next lines does not wait for the upload.
pub(crate) fn send_lines(
    transfer: &BlobTransfer<'_>,
    entries: &mut [Entry],
) -> Result<u64, SyncError> {
    let mut sent = 0;
    for e in entries {
        let Some(lb) = &e.line_blob else { continue };
        if e.line.is_empty() {
            continue;
        }
        let mut tmp = tempfile::NamedTempFile::new_in(transfer.temp_dir())
            .ctx(|| "cannot create a temp file in the sync folder".into())?;
        std::io::Write::write_all(&mut tmp, &e.line)
            .ctx(|| "cannot write a temp file in the sync folder".into())?;
        blobs::upload_through(transfer, &lb.sha256_hex, tmp.path())?;
        e.line = Vec::new();
        sent += 1;
    }
    Ok(sent)
}

/// Fills in the line of an entry that travels as a blob; `false` (entry
/// untouched) when the server does not have the blob.
pub(crate) fn fetch_line(ctx: &SyncContext, e: &mut Entry) -> Result<bool, SyncError> {
    let transfer = BlobTransfer::new(&ctx.client, &ctx.identity, &ctx.keys, &ctx.paths.dir);
    fetch_line_through(&transfer, e)
}

/// [`fetch_line`] through `transfer`: for the threads that write a page's
/// sessions, which share one transfer.
pub(crate) fn fetch_line_through(
    transfer: &BlobTransfer<'_>,
    e: &mut Entry,
) -> Result<bool, SyncError> {
    let Some(lb) = e.line_blob.clone() else {
        return Ok(true);
    };
    let Some(tmp) = transfer.fetch_blob_to_temp(&lb.sha256_hex, transfer.temp_dir())? else {
        return Ok(false);
    };
    let mut line = Vec::with_capacity(lb.len as usize);
    tmp.as_file()
        .take(lb.len + 1)
        .read_to_end(&mut line)
        .ctx(|| format!("cannot read the fetched line of entry {}", e.id))?;
    // The hash matched the name; the length and the lack of a newline are
    // what the MAC'd segment promised about the line.
    if line.len() as u64 != lb.len || line.contains(&b'\n') {
        return Err(SyncError::Io {
            context: format!("entry {} from the server was refused", e.id),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "its line blob is not the line the segment names",
            ),
        });
    }
    e.line = line;
    e.line_blob = None;
    Ok(true)
}
