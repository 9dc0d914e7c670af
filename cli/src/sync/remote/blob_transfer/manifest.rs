//! How a blob is cut into parts, and the manifest that says so. Part sizing
//! is arithmetic on zstd's and age's formats: [`sealed_len`] bounds the age file of a
//! plaintext from above, so a part of [`part_size_for`] a limit never seals
//! to more than that limit. [`PartManifest::parse`] is the one gate a fetched
//! manifest passes: the right format and version, this blob's name, a size
//! within [`MAX_BLOB_TOTAL_BYTES`], parts no smaller than [`MIN_PART_BYTES`]
//! and exactly as many as the size needs. No I/O, no server, no keys here.

use serde::{Deserialize, Serialize};

/// The most bytes a blob may have. A manifest claiming more is refused, and
/// a whole blob streaming past it is cut off: a hostile server can make the
/// client download at most this much and throw it away.
pub const MAX_BLOB_TOTAL_BYTES: u64 = 64 << 30;

/// The smallest part a manifest may name, so a manifest cannot ask for an
/// absurd number of downloads (at most 64 Mi parts for the largest blob).
pub const MIN_PART_BYTES: u64 = 1024;

/// `format` of a [`PartManifest`].
pub const MANIFEST_FORMAT: &str = "evi-blob-parts";

/// The [`PartManifest`] version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// Largest manifest plaintext read (ours are about 200 bytes).
pub(super) const MANIFEST_MAX_BYTES: u64 = 4096;

/// age's STREAM chunk and the tag each chunk carries.
const AGE_CHUNK: u64 = 64 * 1024;
const AGE_TAG: u64 = 16;

/// Room for the age header: about 200 bytes for one X25519 recipient, plus
/// the 16-byte nonce; the rest is margin.
pub(super) const AGE_HEADER_ROOM: u64 = 1024;

/// Room for a zstd frame's header and end: at most 18 bytes of header, no
/// checksum; the rest is margin.
const ZSTD_FRAME_ROOM: u64 = 32;
/// zstd's largest block, and the header each block carries. A block that
/// does not compress is stored as it is, so nothing grows by more.
const ZSTD_BLOCK: u64 = 128 * 1024;
const ZSTD_BLOCK_HEADER: u64 = 3;

/// An upper bound on the size of the age file of `plain` bytes sealed as a
/// blob (compressed first: for bytes that do not compress, zstd's frame and
/// block headers), then age's header and a tag per 64 KiB chunk (an empty
/// blob still has one chunk).
pub fn sealed_len(plain: u64) -> u64 {
    let z = plain + ZSTD_FRAME_ROOM + ZSTD_BLOCK_HEADER * plain.div_ceil(ZSTD_BLOCK).max(1);
    AGE_HEADER_ROOM + z + AGE_TAG * z.div_ceil(AGE_CHUNK).max(1)
}

/// The largest part whose age file fits in `limit` bytes, whatever its
/// bytes; `None` when the limit cannot hold even [`MIN_PART_BYTES`].
pub fn part_size_for(limit: u64) -> Option<u64> {
    // sealed_len grows with its argument: the largest size it keeps within
    // the limit, by bisection.
    let (mut lo, mut hi) = (0u64, limit);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if sealed_len(mid) <= limit {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    (lo >= MIN_PART_BYTES && sealed_len(lo) <= limit).then_some(lo)
}

/// The plaintext of a blob's manifest: how it was split. Serialized as JSON
/// with these field names, e.g. `{"format":"evi-blob-parts","version":1,
/// "sha256":"…","size":3145728,"part_size":983040,"parts":4}`. The blob's
/// own name is inside so a manifest moved under another blob's name is
/// refused at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartManifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: String,
    /// [`MANIFEST_VERSION`]; a later version is refused, not guessed at.
    pub version: u32,
    /// The blob's name: the SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// The blob's size in bytes.
    pub size: u64,
    /// Plaintext bytes of every part but the last.
    pub part_size: u64,
    /// Number of parts: `size / part_size` rounded up.
    pub parts: u64,
}

/// Why a manifest (or a part it names) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the part manifest is longer than {max} bytes", max = MANIFEST_MAX_BYTES)]
    TooLong,
    #[error("not a part manifest: {0}")]
    NotManifest(String),
    #[error("part manifest version {0} is not supported by this evi (update evi)")]
    Version(u32),
    #[error("the part manifest is for another blob ({0})")]
    OtherBlob(String),
    #[error("the part manifest gives a size of {0} bytes, outside 1 to {max}", max = MAX_BLOB_TOTAL_BYTES)]
    Size(u64),
    #[error("the part manifest gives a part size of {0} bytes, outside {min} to {max}", min = MIN_PART_BYTES, max = MAX_BLOB_TOTAL_BYTES)]
    PartSize(u64),
    #[error("the part manifest gives {parts} parts of {part_size} bytes for {size} bytes")]
    Count {
        parts: u64,
        part_size: u64,
        size: u64,
    },
    #[error("part {index} holds more or fewer than the {expected} bytes its manifest gives")]
    PartLength { index: u64, expected: u64 },
}

impl PartManifest {
    /// The manifest of a blob of `size` bytes split into `part_size` parts.
    pub fn new(sha256: &str, size: u64, part_size: u64) -> Self {
        Self {
            format: MANIFEST_FORMAT.to_owned(),
            version: MANIFEST_VERSION,
            sha256: sha256.to_owned(),
            size,
            part_size,
            parts: size.div_ceil(part_size.max(1)),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest always serializes")
    }

    /// Reads and checks a manifest fetched for `expected_sha256`: the right
    /// format and version, this blob, and sizes that add up within bounds.
    pub fn parse(bytes: &[u8], expected_sha256: &str) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        if bytes.len() as u64 > MANIFEST_MAX_BYTES {
            return Err(ManifestError::TooLong);
        }
        let head: Head =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::NotManifest(e.to_string()))?;
        if head.format != MANIFEST_FORMAT {
            return Err(ManifestError::NotManifest(format!(
                "format {:?}",
                head.format
            )));
        }
        if head.version != MANIFEST_VERSION {
            return Err(ManifestError::Version(head.version));
        }
        let m: Self =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::NotManifest(e.to_string()))?;
        if m.sha256 != expected_sha256 {
            return Err(ManifestError::OtherBlob(m.sha256));
        }
        if m.size == 0 || m.size > MAX_BLOB_TOTAL_BYTES {
            return Err(ManifestError::Size(m.size));
        }
        if !(MIN_PART_BYTES..=MAX_BLOB_TOTAL_BYTES).contains(&m.part_size) {
            return Err(ManifestError::PartSize(m.part_size));
        }
        // Exactly the parts the size needs: no empty part, no part beyond.
        if m.parts != m.size.div_ceil(m.part_size) {
            return Err(ManifestError::Count {
                parts: m.parts,
                part_size: m.part_size,
                size: m.size,
            });
        }
        Ok(m)
    }

    /// Where part `index` starts in the blob, and its length.
    pub fn part_range(&self, index: u64) -> (u64, u64) {
        let start = index * self.part_size;
        (start, self.part_size.min(self.size - start))
    }
}
