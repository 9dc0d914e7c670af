//! Checkpoint blobs as streamed age files.
//!
//! # Promises
//!
//! A sealed blob is a standard binary age file to the identity's own X25519
//! recipient whose plaintext is the blob's bytes as one zstd frame (level
//! [`ZSTD_LEVEL`]): `age -d -i identity.txt | zstd -d` yields the original
//! file. It is stored under `SyncKeys::blob_key(sha256_hex)`. Compressing
//! halves what the server stores for text (source files, the long lines
//! sent as blobs) and costs little for what does not compress.
//!
//! Blobs sealed before compression hold the bare bytes. A plaintext that
//! begins with zstd's magic number is decoded, any other is taken as it is;
//! for an old bare blob that begins with the magic itself (a checkpointed
//! `.zst` file), [`BlobDecoding::Bare`] opens it as it is.
//!
//! Both directions stream through age's 64 KiB chunks with a fixed buffer, so
//! a large blob never sits whole in memory. [`open_blob`] hashes the plaintext
//! as it goes and fails with [`BlobError::HashMismatch`] unless its SHA-256 is
//! the expected name; since the output was already written by then, callers
//! write to a temporary file, or use [`open_blob_to_path`], which writes a
//! temp file beside the destination, fsyncs it, and links it into place only
//! after the hash matched (never replacing an existing blob).
//!
//! Blobs need no MAC: the keyed name can only be computed with the id key,
//! and the content must hash to the name it was requested under, so a server
//! cannot swap or forge a blob.

use std::io::{self, BufReader, Read, Write};
use std::iter;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::fsutil::{persist_new, temp_beside};
use crate::sync::seal::identity::Identity;
use crate::sync::seal::zstd_context::compress_into;

const BUF: usize = 64 * 1024;

/// zstd level of blobs (see `bench/RESULTS.md`).
pub const ZSTD_LEVEL: i32 = 3;

/// zstd window of blobs: 1 MiB rather than level 3's 2 MiB. A pull opens
/// several blobs at once, each decoder holding its window: eight at 2 MiB
/// were the largest part of a fresh pull's memory, and checkpointed files
/// repeat little at distances past 1 MiB.
const WINDOW_LOG: u32 = 20;

/// The first four bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// How an opened blob's plaintext is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobDecoding {
    /// Decoded when it begins with zstd's magic (every blob sealed now).
    Auto,
    /// As it is (a blob sealed before compression).
    Bare,
}

/// Why a blob could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error(
        "blob does not decrypt with this identity (altered, truncated, or encrypted to another key): {0}"
    )]
    Decrypt(String),
    #[error(
        "blob content does not match its name: expected SHA-256 {expected}, got {actual}; nothing was kept"
    )]
    HashMismatch { expected: String, actual: String },
    #[error("blob name {0:?} is not 64 lowercase hex characters")]
    BadName(String),
    #[error("blob I/O failed: {0}")]
    Io(#[from] io::Error),
    #[error("could not encrypt the blob: {0}")]
    Encrypt(String),
    /// What the server holds under the blob's names cannot be the blob: a
    /// part manifest that does not add up, or more bytes than a blob may
    /// have (see `blob_transfer`).
    #[error("{0}")]
    Inconsistent(String),
}

/// The SHA-256 (lowercase hex) and size of a blob's plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobDigest {
    pub sha256_hex: String,
    pub size: u64,
}

/// What [`open_blob_to_path`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobWrite {
    /// The blob was verified and written; its size in bytes.
    Written(u64),
    /// A file of that name already existed and was left untouched (the
    /// decrypted content was verified, then discarded).
    AlreadyPresent,
}

fn check_name(name: &str) -> Result<(), BlobError> {
    let ok = name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(BlobError::BadName(name.to_owned()))
    }
}

/// Encrypts `plaintext` to the identity's recipient, streaming into `out`.
/// Returns `out` and the plaintext's digest (check it against the name the
/// caller expects: the file may have changed since it was named).
pub fn seal_blob<R: Read, W: Write>(
    identity: &Identity,
    mut plaintext: R,
    out: W,
) -> Result<(W, BlobDigest), BlobError> {
    let enc =
        age::Encryptor::with_recipients(iter::once(identity.recipient() as &dyn age::Recipient))
            .map_err(|e| BlobError::Encrypt(e.to_string()))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; BUF];
    let (age_w, ()) = compress_into(enc.wrap_output(out)?, ZSTD_LEVEL, WINDOW_LOG, |w| {
        loop {
            let n = match plaintext.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            w.write_all(&buf[..n])?;
            size += n as u64;
        }
    })
    .map_err(BlobError::Io)?;
    let out = age_w.finish()?;
    Ok((
        out,
        BlobDigest {
            sha256_hex: hex::encode(hasher.finalize()),
            size,
        },
    ))
}

/// Decrypts `ciphertext` into `out`, streaming; fails unless the plaintext's
/// SHA-256 is `expected_sha256_hex`. On failure `out` may hold partial or
/// wrong data: the caller must discard it.
pub fn open_blob<R: Read, W: Write>(
    identity: &Identity,
    expected_sha256_hex: &str,
    ciphertext: R,
    out: W,
) -> Result<u64, BlobError> {
    open_blob_as(
        identity,
        expected_sha256_hex,
        ciphertext,
        out,
        BlobDecoding::Auto,
    )
}

/// The plaintext of a sealed blob, streamed: decrypted, then decoded as
/// `decoding` says. A zstd window past 2^[`MAX_WINDOW_LOG`] is refused, so a
/// hostile blob cannot make the decoder allocate more than that.
///
/// [`MAX_WINDOW_LOG`]: crate::sync::seal::segment::MAX_WINDOW_LOG
pub fn blob_reader<'a, R: Read + 'a>(
    identity: &Identity,
    ciphertext: R,
    decoding: BlobDecoding,
) -> Result<Box<dyn Read + 'a>, BlobError> {
    let dec = age::Decryptor::new_buffered(BufReader::with_capacity(BUF, ciphertext))
        .map_err(|e| BlobError::Decrypt(e.to_string()))?;
    let mut r = dec
        .decrypt(iter::once(identity.age_identity() as &dyn age::Identity))
        .map_err(|e| BlobError::Decrypt(e.to_string()))?;
    if decoding == BlobDecoding::Bare {
        return Ok(Box::new(r));
    }
    let mut head = Vec::with_capacity(ZSTD_MAGIC.len());
    (&mut r)
        .take(ZSTD_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| BlobError::Decrypt(e.to_string()))?;
    let compressed = head == ZSTD_MAGIC;
    let whole = io::Cursor::new(head).chain(r);
    if !compressed {
        return Ok(Box::new(whole));
    }
    let mut z = zstd::stream::read::Decoder::new(whole)?;
    z.window_log_max(crate::sync::seal::segment::MAX_WINDOW_LOG)?;
    Ok(Box::new(z))
}

/// [`open_blob`], reading the plaintext as `decoding` says.
pub fn open_blob_as<R: Read, W: Write>(
    identity: &Identity,
    expected_sha256_hex: &str,
    ciphertext: R,
    mut out: W,
    decoding: BlobDecoding,
) -> Result<u64, BlobError> {
    check_name(expected_sha256_hex)?;
    let mut r = blob_reader(identity, ciphertext, decoding)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(BlobError::Decrypt(e.to_string())),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        size += n as u64;
    }
    out.flush()?;
    let actual = hex::encode(hasher.finalize());
    if actual != expected_sha256_hex {
        return Err(BlobError::HashMismatch {
            expected: expected_sha256_hex.to_owned(),
            actual,
        });
    }
    Ok(size)
}

/// [`open_blob`] into a new file at `dest` (mode 0600): written to a temp file
/// beside it, fsynced, and linked into place only once verified. An existing
/// `dest` is never rewritten.
pub fn open_blob_to_path<R: Read>(
    identity: &Identity,
    expected_sha256_hex: &str,
    ciphertext: R,
    dest: &Path,
) -> Result<BlobWrite, BlobError> {
    check_name(expected_sha256_hex)?;
    let mut tmp = temp_beside(dest)?;
    let size = {
        let mut w = io::BufWriter::with_capacity(BUF, tmp.as_file_mut());
        let size = open_blob(identity, expected_sha256_hex, ciphertext, &mut w)?;
        w.flush()?;
        size
    };
    match persist_new(tmp, dest) {
        Ok(()) => Ok(BlobWrite::Written(size)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(BlobWrite::AlreadyPresent),
        Err(e) => Err(BlobError::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    #[test]
    fn round_trip_streams_and_is_plain_age() {
        let id = Identity::generate();
        // Several age chunks, not a multiple of the chunk size.
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (ct, digest) = seal_blob(&id, &data[..], Vec::new()).unwrap();
        assert_eq!(digest.sha256_hex, sha(&data));
        assert_eq!(digest.size, data.len() as u64);

        let mut out = Vec::new();
        let n = open_blob(&id, &digest.sha256_hex, &ct[..], &mut out).unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(out, data);

        // age alone opens it to a zstd frame of the original bytes.
        assert!(age_open(&id, &ct).starts_with(&ZSTD_MAGIC));
        assert_eq!(zstd::decode_all(&age_open(&id, &ct)[..]).unwrap(), data);
        // Repetitive text is stored in a fraction of its size.
        assert!(ct.len() < data.len() / 10, "{} bytes", ct.len());
    }

    #[test]
    fn a_big_blob_opens_with_a_window_of_one_mib() {
        // What a pull's decoder must hold for each blob it opens: a frame
        // asking for more than 2^WINDOW_LOG is refused by this decoder.
        let id = Identity::generate();
        let mut x = 1u64;
        let data: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                b"abcdefgh \n"[(x >> 60) as usize % 10]
            })
            .collect();
        let (ct, _) = seal_blob(&id, &data[..], Vec::new()).unwrap();
        let frame = age_open(&id, &ct);
        let mut d = zstd::stream::read::Decoder::new(&frame[..]).unwrap();
        d.window_log_max(WINDOW_LOG).unwrap();
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
        let mut d = zstd::stream::read::Decoder::new(&frame[..]).unwrap();
        d.window_log_max(WINDOW_LOG - 1).unwrap();
        assert!(
            d.read_to_end(&mut Vec::new()).is_err(),
            "the window is 2^{WINDOW_LOG}"
        );
    }

    fn age_open(id: &Identity, ct: &[u8]) -> Vec<u8> {
        let mut plain = Vec::new();
        age::Decryptor::new(ct)
            .unwrap()
            .decrypt(iter::once(id.age_identity() as &dyn age::Identity))
            .unwrap()
            .read_to_end(&mut plain)
            .unwrap();
        plain
    }

    /// A blob sealed before compression: age of the bare bytes.
    fn seal_bare(id: &Identity, data: &[u8]) -> Vec<u8> {
        let enc =
            age::Encryptor::with_recipients(iter::once(id.recipient() as &dyn age::Recipient))
                .unwrap();
        let mut ct = Vec::new();
        let mut w = enc.wrap_output(&mut ct).unwrap();
        w.write_all(data).unwrap();
        w.finish().unwrap();
        ct
    }

    #[test]
    fn blobs_sealed_before_compression_still_open() {
        let id = Identity::generate();
        let plain = b"an old blob, stored as it is".to_vec();
        let mut out = Vec::new();
        open_blob(&id, &sha(&plain), &seal_bare(&id, &plain)[..], &mut out).unwrap();
        assert_eq!(out, plain);
        // One that is itself a zstd file reads as a frame at first (and does
        // not match its name), then as it is when asked.
        let zst = zstd::encode_all(&b"a checkpointed .zst file"[..], 19).unwrap();
        let ct = seal_bare(&id, &zst);
        assert!(matches!(
            open_blob(&id, &sha(&zst), &ct[..], Vec::new()),
            Err(BlobError::HashMismatch { .. })
        ));
        let mut out = Vec::new();
        open_blob_as(&id, &sha(&zst), &ct[..], &mut out, BlobDecoding::Bare).unwrap();
        assert_eq!(out, zst);
        // Sealed now, it is compressed again and opens to itself.
        let (ct, _) = seal_blob(&id, &zst[..], Vec::new()).unwrap();
        let mut out = Vec::new();
        open_blob(&id, &sha(&zst), &ct[..], &mut out).unwrap();
        assert_eq!(out, zst);
    }

    #[test]
    fn wrong_content_is_refused_and_leaves_nothing() {
        let id = Identity::generate();
        let (ct, _) = seal_blob(&id, &b"the real content"[..], Vec::new()).unwrap();
        let claimed = sha(b"something else");
        let err = open_blob(&id, &claimed, &ct[..], Vec::new()).unwrap_err();
        assert!(matches!(err, BlobError::HashMismatch { .. }), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join(&claimed);
        let err = open_blob_to_path(&id, &claimed, &ct[..], &dest).unwrap_err();
        assert!(matches!(err, BlobError::HashMismatch { .. }), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn to_path_writes_once_and_never_rewrites() {
        let id = Identity::generate();
        let data = b"checkpoint bytes";
        let name = sha(data);
        let (ct, _) = seal_blob(&id, &data[..], Vec::new()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("blobs").join(&name);
        assert_eq!(
            open_blob_to_path(&id, &name, &ct[..], &dest).unwrap(),
            BlobWrite::Written(data.len() as u64)
        );
        assert_eq!(std::fs::read(&dest).unwrap(), data);
        assert_eq!(
            open_blob_to_path(&id, &name, &ct[..], &dest).unwrap(),
            BlobWrite::AlreadyPresent
        );
        assert_eq!(
            std::fs::read_dir(dest.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn tampered_or_foreign_blob_fails_to_decrypt() {
        let id = Identity::generate();
        let data = vec![7u8; 100_000];
        let name = sha(&data);
        let (mut ct, _) = seal_blob(&id, &data[..], Vec::new()).unwrap();
        let other = Identity::generate();
        assert!(matches!(
            open_blob(&other, &name, &ct[..], Vec::new()),
            Err(BlobError::Decrypt(_))
        ));
        let mid = ct.len() / 2;
        ct[mid] ^= 1;
        assert!(matches!(
            open_blob(&id, &name, &ct[..], Vec::new()),
            Err(BlobError::Decrypt(_))
        ));
        assert!(matches!(
            open_blob(&id, "../../etc/passwd", &ct[..], Vec::new()),
            Err(BlobError::BadName(_))
        ));
    }
}
