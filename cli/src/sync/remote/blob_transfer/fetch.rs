//! The fetch path of [`BlobTransfer`]: the whole blob or, when the server
//! has only parts, its manifest and then each part in order, decrypted and
//! hashed as they stream into a temp file, and kept only when the whole
//! hashes to the blob's name (into its destination only if none is there
//! yet: an existing file is never replaced). Whatever is refused or missing
//! leaves nothing behind. An answer cut short (the connection lost mid-body)
//! is not a refusal: the whole blob is fetched again, into a fresh temp
//! file, with the client's backoff. A hostile server can make the client download at
//! most [`MAX_BLOB_TOTAL_BYTES`] for a blob and no more: a whole blob is cut
//! off there, a manifest is bounded, and each part may hold only the bytes
//! its place in the manifest gives.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::manifest::{MANIFEST_MAX_BYTES, MAX_BLOB_TOTAL_BYTES, ManifestError, PartManifest};
use super::{BUF, BlobTransfer, Fetched, TransferError, in_parallel, is_sha_name};
use crate::fsutil::{persist_new, sync_dir, sync_files, temp_beside};
use crate::sync::remote::client::{ClientError, CutWatch};
use crate::sync::seal::blob::{BlobDecoding, blob_reader, open_blob_as};
use crate::sync::{BlobError, Identity};

/// A fetched blob before it is placed.
pub(crate) enum Landing {
    /// Verified, in a temp file beside its destination; its size.
    Verified(NamedTempFile, u64),
    /// Nothing to place.
    Done(Fetched),
}

fn write_error(dest: &Path, source: io::Error) -> TransferError {
    TransferError::Io {
        context: format!("cannot write {}", dest.display()),
        source,
    }
}

/// A name asked for must be a SHA-256 before it names a file or a key.
fn check_name(sha: &str) -> Result<(), TransferError> {
    if is_sha_name(sha) {
        Ok(())
    } else {
        Err(TransferError::Refused {
            sha: sha.to_owned(),
            source: BlobError::BadName(sha.to_owned()),
        })
    }
}

fn is_404(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status: 404, .. })
}

impl BlobTransfer<'_> {
    /// Fetches, verifies and links a blob into `dest` (created, never
    /// replaced); the folder is created if missing. An existing `dest` is
    /// not fetched at all.
    pub fn fetch_blob(&self, sha256: &str, dest: &Path) -> Result<Fetched, TransferError> {
        match self.fetch_unplaced(sha256, dest)? {
            Landing::Verified(tmp, size) => match persist_new(tmp, dest) {
                Ok(()) => Ok(Fetched::Written(size)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Fetched::AlreadyPresent),
                Err(e) => Err(write_error(dest, e)),
            },
            Landing::Done(f) => Ok(f),
        }
    }

    /// [`Self::fetch_blob`] of many blobs, a few at once ([`in_parallel`]),
    /// made durable together: one `syncfs` (see [`sync_files`]) for all
    /// their bytes, then each linked into place (never replacing a file),
    /// then one fsync per folder for the new names. A pull of hundreds of
    /// blobs paid two fsyncs each. Nothing is in place before its bytes are
    /// durable; a failure leaves only what was in place before.
    pub fn fetch_blobs<S: AsRef<str> + Sync>(
        &self,
        items: &[(S, PathBuf)],
    ) -> Result<Vec<Fetched>, TransferError> {
        let landed = self.land_blobs(items)?;
        Self::place_blobs(items, landed)
    }

    /// The first half of [`Self::fetch_blobs`]: each of `items` fetched,
    /// verified and made durable in a temp file beside its destination,
    /// nothing placed yet (what is landed and never placed is deleted on
    /// drop).
    pub(crate) fn land_blobs<S: AsRef<str> + Sync>(
        &self,
        items: &[(S, PathBuf)],
    ) -> Result<Vec<Landing>, TransferError> {
        let landed = in_parallel(items, |(sha, dest)| self.fetch_unplaced(sha.as_ref(), dest))?;
        let mut files = Vec::new();
        for l in &landed {
            if let Landing::Verified(tmp, _) = l {
                let f = tmp.as_file().try_clone();
                files.push(f.map_err(|e| write_error(tmp.path(), e))?);
            }
        }
        if !files.is_empty() {
            sync_files(files).map_err(|e| TransferError::Io {
                context: "cannot make the fetched blobs durable".into(),
                source: e,
            })?;
        }
        Ok(landed)
    }

    /// The second half of [`Self::fetch_blobs`]: the blobs `landed` for
    /// `items` linked into place (never replacing a file), then one fsync
    /// per folder for the new names.
    pub(crate) fn place_blobs<S>(
        items: &[(S, PathBuf)],
        landed: Vec<Landing>,
    ) -> Result<Vec<Fetched>, TransferError> {
        let mut folders = BTreeSet::new();
        let mut out = Vec::with_capacity(landed.len());
        for ((_, dest), l) in items.iter().zip(landed) {
            out.push(match l {
                Landing::Verified(tmp, size) => match tmp.persist_noclobber(dest) {
                    Ok(_) => {
                        folders.insert(dest.parent().unwrap_or(Path::new(".")).to_owned());
                        Fetched::Written(size)
                    }
                    Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                        Fetched::AlreadyPresent
                    }
                    Err(e) => return Err(write_error(dest, e.error)),
                },
                Landing::Done(f) => f,
            });
        }
        for dir in folders {
            sync_dir(&dir).map_err(|e| write_error(&dir, e))?;
        }
        Ok(out)
    }

    /// Fetches and verifies a blob into a temp file beside `dest`, neither
    /// durable nor in place yet.
    fn fetch_unplaced(&self, sha256: &str, dest: &Path) -> Result<Landing, TransferError> {
        check_name(sha256)?;
        if dest.exists() {
            return Ok(Landing::Done(Fetched::AlreadyPresent));
        }
        let fetched = self.again_if_cut(|| {
            let mut tmp = temp_beside(dest).map_err(|e| write_error(dest, e))?;
            Ok(self
                .fetch_into(sha256, tmp.as_file_mut())?
                .map(|n| (n, tmp)))
        })?;
        Ok(match fetched {
            Some((size, tmp)) => Landing::Verified(tmp, size),
            None => Landing::Done(Fetched::Missing),
        })
    }

    /// Fetches and verifies a blob as [`Self::fetch_blob`] does, keeping
    /// nothing (`evi sync verify`): its size, or `None` when the server has
    /// neither the whole blob nor all its parts.
    pub fn verify_blob(&self, sha256: &str) -> Result<Option<u64>, TransferError> {
        check_name(sha256)?;
        self.again_if_cut(|| self.fetch_into(sha256, &mut Discard::default()))
    }

    /// `f` again while it fails on an answer cut short (each time into a
    /// fresh temp file: the dropped one is deleted).
    fn again_if_cut<T>(
        &self,
        f: impl FnMut() -> Result<T, TransferError>,
    ) -> Result<T, TransferError> {
        self.client.again_if_cut(
            |e| match e {
                TransferError::Client(c) if c.is_cut() => Some(c),
                _ => None,
            },
            f,
        )
    }

    /// Fetches and verifies a blob into a new temp file in `dir` (created if
    /// missing), for a caller that wants the bytes rather than a file in
    /// `checkpoints/blobs/`: read it from the start, or persist it. `None`
    /// when the server does not have it. The file is deleted on drop.
    pub fn fetch_blob_to_temp(
        &self,
        sha256: &str,
        dir: &Path,
    ) -> Result<Option<NamedTempFile>, TransferError> {
        check_name(sha256)?;
        let io_err = |source| TransferError::Io {
            context: format!("cannot write a temp file in {}", dir.display()),
            source,
        };
        let fetched = self.again_if_cut(|| {
            let mut tmp = temp_beside(&dir.join(sha256)).map_err(io_err)?;
            Ok(self.fetch_into(sha256, tmp.as_file_mut())?.map(|_| tmp))
        })?;
        let Some(mut tmp) = fetched else {
            return Ok(None);
        };
        tmp.as_file_mut().seek(SeekFrom::Start(0)).map_err(io_err)?;
        Ok(Some(tmp))
    }

    /// Writes the verified blob into `out` (fresh, empty); its size, or
    /// `None` when the server has neither the whole blob nor all its parts.
    /// Whatever failed while an answer was cut short is that cut
    /// ([`ClientError::Cut`]), not a blob to refuse.
    fn fetch_into<W: Write + Seek + Restart>(
        &self,
        sha: &str,
        out: &mut W,
    ) -> Result<Option<u64>, TransferError> {
        let cut = CutWatch::default();
        let result = self.fetch_watched(sha, out, &cut);
        match self.client.cut_error(&cut) {
            Some(e) if result.is_err() => Err(e.into()),
            _ => result,
        }
    }

    fn fetch_watched<W: Write + Seek + Restart>(
        &self,
        sha: &str,
        out: &mut W,
        cut: &CutWatch,
    ) -> Result<Option<u64>, TransferError> {
        match self.client.get_blob(&self.keys.blob_key(sha), cut) {
            Ok(body) => {
                let first = self.open_whole(sha, body, out, BlobDecoding::Auto);
                let maybe_bare = matches!(
                    &first,
                    Err(TransferError::Refused {
                        source: BlobError::HashMismatch { .. } | BlobError::Decrypt(_),
                        ..
                    })
                );
                if !maybe_bare {
                    return first;
                }
                // A bare blob sealed before compression whose bytes begin
                // like a zstd frame: fetched again and taken as it is.
                out.restart().map_err(|source| TransferError::Io {
                    context: format!("cannot write blob {sha}"),
                    source,
                })?;
                let body = self.client.get_blob(&self.keys.blob_key(sha), cut)?;
                return self.open_whole(sha, body, out, BlobDecoding::Bare);
            }
            Err(e) if is_404(&e) => {}
            Err(e) => return Err(e.into()),
        }
        let m = match self.client.get_blob(&self.keys.blob_manifest_key(sha), cut) {
            Ok(body) => read_manifest(self.identity, sha, body)?,
            Err(e) if is_404(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let parts = m.parts;
        // A part cut short is fetched again on its own: a blob of many
        // parts would otherwise rarely get through a lossy link whole.
        let mut backoff = self.client.backoff();
        join_parts(
            self.identity,
            &m,
            |i| match self
                .client
                .get_blob(&self.keys.blob_part_key(sha, i, parts), cut)
            {
                Ok(body) => Ok(Some(body)),
                Err(e) if is_404(&e) => Ok(None),
                Err(e) => Err(e.into()),
            },
            |failed| match self.client.cut_error(cut) {
                Some(c) if backoff.wait_to_retry(&c) => Ok(()),
                Some(c) => Err(c.into()),
                None => Err(failed),
            },
            BufWriter::with_capacity(BUF, out),
        )
    }
}

impl BlobTransfer<'_> {
    /// Opens a whole blob's body into `out`, at most
    /// [`MAX_BLOB_TOTAL_BYTES`] of it.
    fn open_whole<W: Write>(
        &self,
        sha: &str,
        body: impl Read,
        out: &mut W,
        decoding: BlobDecoding,
    ) -> Result<Option<u64>, TransferError> {
        let write_err = |source| TransferError::Io {
            context: format!("cannot write blob {sha}"),
            source,
        };
        let mut w = Capped::new(BufWriter::with_capacity(BUF, &mut *out));
        let size = match open_blob_as(self.identity, sha, body, &mut w, decoding) {
            Ok(n) => n,
            Err(_) if w.over => {
                return Err(TransferError::Refused {
                    sha: sha.to_owned(),
                    source: BlobError::Inconsistent(format!(
                        "it is longer than the {MAX_BLOB_TOTAL_BYTES} bytes a blob may have"
                    )),
                });
            }
            Err(BlobError::Io(e)) => return Err(write_err(e)),
            Err(source) => {
                return Err(TransferError::Refused {
                    sha: sha.to_owned(),
                    source,
                });
            }
        };
        w.inner.flush().map_err(write_err)?;
        Ok(Some(size))
    }
}

/// Where a blob is written, emptied for a second attempt.
pub(super) trait Restart {
    fn restart(&mut self) -> io::Result<()>;
}

impl Restart for File {
    fn restart(&mut self) -> io::Result<()> {
        self.set_len(0)?;
        self.seek(SeekFrom::Start(0)).map(|_| ())
    }
}

impl Restart for Discard {
    fn restart(&mut self) -> io::Result<()> {
        self.pos = 0;
        Ok(())
    }
}

/// Takes bytes and keeps none, where they go (a blob verified only).
#[derive(Default)]
struct Discard {
    pos: u64,
}

impl Write for Discard {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Discard {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(n) => n,
            _ => {
                return Err(io::Error::other(
                    "a discarded blob seeks from its start only",
                ));
            }
        };
        Ok(self.pos)
    }
}

/// A writer that refuses to grow past [`MAX_BLOB_TOTAL_BYTES`], and says so.
pub(super) struct Capped<W> {
    pub(super) inner: W,
    pub(super) left: u64,
    pub(super) over: bool,
}

impl<W> Capped<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            left: MAX_BLOB_TOTAL_BYTES,
            over: false,
        }
    }
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.over = true;
            return Err(io::Error::other("blob longer than any blob may be"));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// An age decryptor of `ciphertext` for the identity.
/// A manifest's or part's plaintext (parts and manifests are sealed as
/// blobs are, so they are decoded the same way).
fn decryptor<'a, R: Read + 'a>(
    identity: &Identity,
    ciphertext: R,
) -> Result<Box<dyn Read + 'a>, BlobError> {
    blob_reader(identity, ciphertext, BlobDecoding::Auto)
}

/// Decrypts and checks a manifest fetched for `sha`.
pub(super) fn read_manifest<R: Read>(
    identity: &Identity,
    sha: &str,
    ciphertext: R,
) -> Result<PartManifest, TransferError> {
    let refused = |source| TransferError::Refused {
        sha: sha.to_owned(),
        source,
    };
    let mut plain = Vec::new();
    decryptor(identity, ciphertext)
        .map_err(refused)?
        .take(MANIFEST_MAX_BYTES + 1)
        .read_to_end(&mut plain)
        .map_err(|e| refused(BlobError::Decrypt(e.to_string())))?;
    PartManifest::parse(&plain, sha).map_err(|source| TransferError::Manifest {
        sha: sha.to_owned(),
        source,
    })
}

/// Decrypts the parts `next(i)` yields, in order, into `out`, checking each
/// part's length against the manifest and the whole against its name.
/// `Ok(None)` as soon as a part is not on the server. A part that fails is
/// handed to `again`: `Ok(())` reads that part once more (from `next`, over
/// what it wrote of it; `out` starts at the blob's first byte), an error
/// ends the join with it.
pub(super) fn join_parts<R: Read, W: Write + Seek>(
    identity: &Identity,
    m: &PartManifest,
    mut next: impl FnMut(u64) -> Result<Option<R>, TransferError>,
    mut again: impl FnMut(TransferError) -> Result<(), TransferError>,
    mut out: W,
) -> Result<Option<u64>, TransferError> {
    let sha = m.sha256.as_str();
    let refused = |source| TransferError::Refused {
        sha: sha.to_owned(),
        source,
    };
    let write_err = |source| TransferError::Io {
        context: format!("cannot write blob {sha}"),
        source,
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    for i in 0..m.parts {
        let (start, _) = m.part_range(i);
        let before = hasher.clone();
        loop {
            let Some(ct) = next(i)? else {
                return Ok(None);
            };
            match copy_part(identity, m, i, ct, &mut hasher, &mut out, &mut buf) {
                Ok(()) => break,
                Err(e) => {
                    again(e)?;
                    hasher = before.clone();
                    out.seek(SeekFrom::Start(start)).map_err(write_err)?;
                }
            }
        }
    }
    out.flush().map_err(write_err)?;
    let actual = hex::encode(hasher.finalize());
    if actual != sha {
        return Err(refused(BlobError::HashMismatch {
            expected: sha.to_owned(),
            actual,
        }));
    }
    Ok(Some(m.size))
}

/// Decrypts part `i` from `ct` into `out` and `hasher`: exactly the bytes
/// its place in the manifest gives, or an error.
fn copy_part<R: Read, W: Write>(
    identity: &Identity,
    m: &PartManifest,
    i: u64,
    ct: R,
    hasher: &mut Sha256,
    out: &mut W,
    buf: &mut [u8],
) -> Result<(), TransferError> {
    let sha = m.sha256.as_str();
    let refused = |source| TransferError::Refused {
        sha: sha.to_owned(),
        source,
    };
    let (_, expected) = m.part_range(i);
    // One byte more than the part may hold tells a long part from a right
    // one without reading the rest.
    let mut r = decryptor(identity, ct).map_err(refused)?.take(expected + 1);
    let mut got = 0u64;
    loop {
        let n = match r.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(refused(BlobError::Decrypt(e.to_string()))),
        };
        got += n as u64;
        if got > expected {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|source| TransferError::Io {
                context: format!("cannot write blob {sha}"),
                source,
            })?;
    }
    if got != expected {
        return Err(TransferError::Manifest {
            sha: sha.to_owned(),
            source: ManifestError::PartLength { index: i, expected },
        });
    }
    Ok(())
}
