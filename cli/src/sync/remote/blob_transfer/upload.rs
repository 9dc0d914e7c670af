//! The upload path of [`BlobTransfer`]: a blob goes up whole when its age
//! file fits the server's `max_blob_bytes`, else as its parts and then its
//! manifest, last, so a manifest on the server means every part is there
//! (and parts already there are not sent again). Nothing goes up whose bytes
//! do not hash to the blob's name: the file is hashed, whole and per part,
//! before anything is sealed, and each part sealed must hash the same before
//! it is sent. A blob that cannot be read, has changed, or is refused is an
//! [`UploadOutcome::Failed`] for it alone; a 413 under the advertised limit
//! halves the limit tried. Sealed bytes wait in temp files in the sync
//! folder, deleted whether sent or not.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use evi_shared::KeyedId;
use evi_shared::limits::MAX_NAMES_PER_CALL;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::manifest::{MAX_BLOB_TOTAL_BYTES, PartManifest, part_size_for, sealed_len};
use super::{
    BUF, BlobTransfer, TRANSFERS, TransferError, UploadFailure, UploadOutcome, in_parallel_on,
    is_sha_name,
};
use crate::sync::remote::client::ClientError;
use crate::sync::seal_blob;

/// One attempt at an upload under one limit.
enum Attempt {
    Done(UploadOutcome),
    /// 413: the server's real limit is lower than the one tried.
    TooLarge(ClientError),
}

impl BlobTransfer<'_> {
    fn max_blob_bytes(&self) -> Result<u64, ClientError> {
        if let Some(m) = self.max_blob_bytes.get() {
            return Ok(*m);
        }
        let m = self.client.capabilities()?.max_blob_bytes;
        let _ = self.max_blob_bytes.set(m);
        Ok(m)
    }

    /// Uploads each `(sha256, source file)` the server lacks, in parts when
    /// its age file would exceed the server's blob limit. One outcome per
    /// blob, in order; asks which are missing in batches, not per blob.
    /// Several go up at once: an upload mostly waits for the server to make
    /// it durable, and one after another a journal of hundreds of blobs
    /// took longer than all the transcripts.
    pub fn upload_blobs(
        &self,
        blobs: &[(String, PathBuf)],
    ) -> Result<Vec<UploadOutcome>, TransferError> {
        self.upload_blobs_on(TRANSFERS, blobs)
    }

    /// [`Self::upload_blobs`] with at most `threads` uploads at once (each
    /// holds a zstd context and its buffers: fewer beside other work).
    pub fn upload_blobs_on(
        &self,
        threads: usize,
        blobs: &[(String, PathBuf)],
    ) -> Result<Vec<UploadOutcome>, TransferError> {
        let shas: Vec<String> = blobs.iter().map(|(s, _)| s.clone()).collect();
        let stored = self.stored(&shas)?;
        let mut out: Vec<Option<UploadOutcome>> = blobs
            .iter()
            .zip(&stored)
            .map(|((sha, _), stored)| {
                if !is_sha_name(sha) {
                    Some(UploadOutcome::Failed(UploadFailure::BadName(sha.clone())))
                } else if *stored {
                    Some(UploadOutcome::AlreadyStored)
                } else {
                    None
                }
            })
            .collect();
        let todo: Vec<usize> = (0..blobs.len()).filter(|i| out[*i].is_none()).collect();
        let sent = in_parallel_on(threads, &todo, |&i| self.send(&blobs[i].0, &blobs[i].1))?;
        for (i, outcome) in todo.into_iter().zip(sent) {
            out[i] = Some(outcome);
        }
        Ok(out
            .into_iter()
            .map(|o| o.expect("every blob has its outcome"))
            .collect())
    }

    /// [`Self::upload_blobs`] for one blob.
    pub fn upload_blob(&self, sha256: &str, src: &Path) -> Result<UploadOutcome, TransferError> {
        let mut v = self.upload_blobs(&[(sha256.to_owned(), src.to_owned())])?;
        Ok(v.pop().expect("one outcome per blob"))
    }

    /// Uploads one blob the server lacks. A 413 despite the advertised
    /// limit (a proxy in front with a lower one) halves the limit tried,
    /// down to parts too small to be worth it.
    fn send(&self, sha: &str, path: &Path) -> Result<UploadOutcome, TransferError> {
        let size = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => {
                return Ok(UploadOutcome::Failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source: io::Error::other("not a regular file"),
                }));
            }
            Err(source) => {
                return Ok(UploadOutcome::Failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source,
                }));
            }
        };
        if size > MAX_BLOB_TOTAL_BYTES {
            return Ok(UploadOutcome::Failed(UploadFailure::TooLarge(size)));
        }
        let mut limit = self.max_blob_bytes()?;
        loop {
            let attempt = if sealed_len(size) <= limit {
                self.send_whole(sha, path)?
            } else {
                match part_size_for(limit) {
                    Some(part) => self.send_parts(sha, path, part)?,
                    None => return Ok(UploadOutcome::Failed(UploadFailure::LimitTooSmall(limit))),
                }
            };
            match attempt {
                Attempt::Done(o) => return Ok(o),
                Attempt::TooLarge(e) => {
                    limit /= 2;
                    if part_size_for(limit).is_none() {
                        return Ok(UploadOutcome::Failed(UploadFailure::Refused(e)));
                    }
                }
            }
        }
    }

    fn temp(&self) -> Result<NamedTempFile, TransferError> {
        tempfile::Builder::new()
            .prefix(".evi-upload-")
            .tempfile_in(self.temp_dir)
            .map_err(|source| TransferError::Io {
                context: format!("cannot create a temp file in {}", self.temp_dir.display()),
                source,
            })
    }

    /// PUTs a sealed file; sorts the failures that concern this blob only
    /// from those that stop the transfer.
    fn put(
        &self,
        name: &KeyedId,
        sealed: &Path,
        part_of: Option<&KeyedId>,
    ) -> Result<Option<Attempt>, TransferError> {
        match self.client.put_blob(name, sealed, part_of) {
            Ok(_) => Ok(None),
            Err(e @ ClientError::Api { status: 413, .. }) => Ok(Some(Attempt::TooLarge(e))),
            // 401, 403: the device is refused; 507: the server has no room
            // (quota or disk): nothing else would go up either.
            Err(e @ ClientError::Api { status, .. })
                if !e.is_transient() && ![401, 403, 507].contains(&status) =>
            {
                Ok(Some(Attempt::Done(UploadOutcome::Failed(
                    UploadFailure::Refused(e),
                ))))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn send_whole(&self, sha: &str, path: &Path) -> Result<Attempt, TransferError> {
        let failed = |f| Ok(Attempt::Done(UploadOutcome::Failed(f)));
        let src = match File::open(path) {
            Ok(f) => f,
            Err(source) => {
                return failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let tmp = self.temp()?;
        let digest = match seal_blob(self.identity, src, tmp.as_file()) {
            Ok((_, d)) => d,
            Err(e) => return failed(UploadFailure::Seal(e)),
        };
        if digest.sha256_hex != sha {
            return failed(UploadFailure::Changed {
                path: path.to_owned(),
                actual: digest.sha256_hex,
            });
        }
        if let Some(a) = self.put(&self.keys.blob_key(sha), tmp.path(), None)? {
            return Ok(a);
        }
        Ok(Attempt::Done(UploadOutcome::Uploaded { parts: 0 }))
    }

    /// Parts the server lacks (an interrupted upload resumes), then the
    /// manifest, each tied to the whole's name.
    fn send_parts(&self, sha: &str, path: &Path, part_size: u64) -> Result<Attempt, TransferError> {
        let failed = |f| Ok(Attempt::Done(UploadOutcome::Failed(f)));
        let unreadable = |source| {
            failed(UploadFailure::Unreadable {
                path: path.to_owned(),
                source,
            })
        };
        let mut src = match File::open(path) {
            Ok(f) => f,
            Err(e) => return unreadable(e),
        };
        let hashes = match hash_parts(&mut src, part_size) {
            Ok(h) => h,
            Err(e) => return unreadable(e),
        };
        if hashes.whole != sha {
            return failed(UploadFailure::Changed {
                path: path.to_owned(),
                actual: hashes.whole,
            });
        }
        let m = PartManifest::new(sha, hashes.size, part_size);
        // Every piece names the whole that records refer to, so the server
        // deletes the pieces with it (see `evi_shared::blob_refs`).
        let whole = self.keys.blob_key(sha);
        let names: Vec<KeyedId> = (0..m.parts)
            .map(|i| self.keys.blob_part_key(sha, i, m.parts))
            .collect();
        let mut missing = BTreeSet::new();
        for chunk in names.chunks(MAX_NAMES_PER_CALL) {
            missing.extend(self.client.missing_blobs(chunk.to_vec())?);
        }
        for (i, name) in names.iter().enumerate() {
            if !missing.contains(name) {
                continue;
            }
            let (start, len) = m.part_range(i as u64);
            if let Err(e) = src.seek(SeekFrom::Start(start)) {
                return unreadable(e);
            }
            let tmp = self.temp()?;
            let digest = match seal_blob(self.identity, (&src).take(len), tmp.as_file()) {
                Ok((_, d)) => d,
                Err(e) => return failed(UploadFailure::Seal(e)),
            };
            if digest.size != len || digest.sha256_hex != hashes.parts[i] {
                return failed(UploadFailure::ChangedWhileSent {
                    path: path.to_owned(),
                    part: i as u64,
                });
            }
            if let Some(a) = self.put(name, tmp.path(), Some(&whole))? {
                return Ok(a);
            }
        }
        let tmp = self.temp()?;
        if let Err(e) = seal_blob(self.identity, &m.to_bytes()[..], tmp.as_file()) {
            return failed(UploadFailure::Seal(e));
        }
        if let Some(a) = self.put(&self.keys.blob_manifest_key(sha), tmp.path(), Some(&whole))? {
            return Ok(a);
        }
        Ok(Attempt::Done(UploadOutcome::Uploaded { parts: m.parts }))
    }
}

/// The SHA-256 of a whole file and of each of its parts.
pub(super) struct PartHashes {
    pub(super) whole: String,
    pub(super) parts: Vec<String>,
    pub(super) size: u64,
}

pub(super) fn hash_parts(src: &mut File, part_size: u64) -> io::Result<PartHashes> {
    src.seek(SeekFrom::Start(0))?;
    let mut whole = Sha256::new();
    let mut parts = Vec::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; BUF];
    loop {
        let mut part = Sha256::new();
        let mut r = (&*src).take(part_size);
        let mut n_part = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            whole.update(&buf[..n]);
            part.update(&buf[..n]);
            n_part += n as u64;
        }
        if n_part == 0 {
            break;
        }
        size += n_part;
        parts.push(hex::encode(part.finalize()));
        if n_part < part_size {
            break;
        }
    }
    Ok(PartHashes {
        whole: hex::encode(whole.finalize()),
        parts,
        size,
    })
}
