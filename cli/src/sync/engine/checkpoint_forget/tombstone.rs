//! The format of a forget of checkpoint journal lines, sealed to the
//! identity and MAC-bound to the ids it is stored under (the same shape as
//! a session's tombstone, [`crate::sync::engine::forget::tombstone`]).
//!
//! ```text
//! ciphertext = age(plaintext)            one X25519 stanza, the identity's own
//! plaintext  = "EVICKF" || u8 version (1) || body || mac[32]
//! body       = lp(journal name) || i64 at (ms since the epoch)
//!              || lp(device id)
//!              || u32 n || n × sha256(line)          the lines forgotten
//!              || u32 m || m × lp(blob sha256 hex)   the blobs they named
//! mac        = HMAC-SHA256(segment MAC key, lp("evi-lines-tombstone-v1")
//!              || u8 version || lp(kind) || body || lp(stream id) || lp(entry id))
//! stream id  = journal_stream_key(journal name)   (the journal's own stream)
//! entry id   = keyed(lp("lines-tombstone") lp(sha256(body)))
//! kind       = "forget-lines"
//! ```
//!
//! `lp(x) = u32 big-endian len(x) || x`. Lines are named by the SHA-256 of
//! their bytes, as the devices holding a copy of the journal know them.

use evi_shared::KeyedId;
use evi_shared::blob_refs::FORGET_LINES_KIND;
use sha2::{Digest, Sha256};

use crate::sync::seal::frame::{Frame, FrameError, lp};
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::SyncKeys;

const FRAME: Frame = Frame {
    magic: b"EVICKF",
    version: 1,
    mac_domain: b"evi-lines-tombstone-v1",
    // Room for many thousands of lines and blobs (a retention run may
    // forget a year of checkpoints at once); callers split larger forgets.
    max_plaintext: 4 << 20,
    not_this: "not a checkpoint forget",
};

/// A forget of some lines of one journal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinesTombstone {
    /// The journal's name (`<device>-<short id>`).
    pub journal: String,
    /// When it was asked, in ms since the epoch.
    pub at_ms: i64,
    /// The server's id of the device that asked.
    pub device: String,
    /// SHA-256 (hex) of each line forgotten.
    pub lines: Vec<String>,
    /// The blobs (SHA-256 hex) no line of the journal names any more.
    pub blobs: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LinesTombstoneError {
    #[error("checkpoint forget does not decrypt with this identity: {0}")]
    Decrypt(String),
    #[error("checkpoint forget is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "checkpoint forget MAC does not verify: not sealed with this identity's keys, or moved by the server"
    )]
    Mac,
    #[error("could not encrypt the checkpoint forget: {0}")]
    Encrypt(String),
}

impl From<FrameError> for LinesTombstoneError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Decrypt(e) => Self::Decrypt(e),
            FrameError::Malformed(m) => Self::Malformed(m),
            FrameError::Mac => Self::Mac,
            FrameError::Encrypt(e) => Self::Encrypt(e),
        }
    }
}

impl LinesTombstone {
    fn body(&self) -> Result<Vec<u8>, LinesTombstoneError> {
        let mut b = Vec::new();
        lp(&mut b, self.journal.as_bytes());
        b.extend_from_slice(&self.at_ms.to_be_bytes());
        lp(&mut b, self.device.as_bytes());
        b.extend_from_slice(&(self.lines.len() as u32).to_be_bytes());
        for l in &self.lines {
            let h = hex::decode(l).ok().filter(|h| h.len() == 32);
            b.extend_from_slice(&h.ok_or(LinesTombstoneError::Malformed("a line hash"))?);
        }
        b.extend_from_slice(&(self.blobs.len() as u32).to_be_bytes());
        for s in &self.blobs {
            lp(&mut b, s.as_bytes());
        }
        Ok(b)
    }

    fn ids_of(keys: &SyncKeys, journal: &str, body: &[u8]) -> (KeyedId, KeyedId) {
        let digest = Sha256::digest(body);
        (
            keys.journal_stream_key(journal),
            keys.keyed_raw(&[b"lines-tombstone", &digest]),
        )
    }

    /// The keyed ids the record is stored under.
    pub fn ids(&self, keys: &SyncKeys) -> Result<(KeyedId, KeyedId), LinesTombstoneError> {
        Ok(Self::ids_of(keys, &self.journal, &self.body()?))
    }

    /// The ciphertext, stored under [`Self::ids`].
    pub fn seal(
        &self,
        keys: &SyncKeys,
        identity: &Identity,
    ) -> Result<Vec<u8>, LinesTombstoneError> {
        let body = self.body()?;
        let (stream, entry) = Self::ids_of(keys, &self.journal, &body);
        Ok(FRAME.seal(keys, identity, FORGET_LINES_KIND, &body, &stream, &entry)?)
    }

    /// Opens a record stored under `stream` and `entry_ids` (kind
    /// `forget-lines`): age, the format, the MAC, and that those are the ids
    /// its content derives.
    pub fn open(
        keys: &SyncKeys,
        identity: &Identity,
        stream: &KeyedId,
        entry_ids: &[KeyedId],
        ciphertext: &[u8],
    ) -> Result<Self, LinesTombstoneError> {
        let (body, entry_id) = FRAME.open(
            keys,
            identity,
            FORGET_LINES_KIND,
            stream,
            entry_ids,
            ciphertext,
        )?;
        let t = parse_body(&body)?;
        if Self::ids_of(keys, &t.journal, &body) != (stream.clone(), entry_id.clone()) {
            return Err(LinesTombstoneError::Mac);
        }
        Ok(t)
    }
}

fn parse_body(body: &[u8]) -> Result<LinesTombstone, LinesTombstoneError> {
    let bad = LinesTombstoneError::Malformed;
    let mut r = body;
    let mut take = |n: usize| -> Result<&[u8], LinesTombstoneError> {
        if r.len() < n {
            return Err(bad("cut short"));
        }
        let (a, b) = r.split_at(n);
        r = b;
        Ok(a)
    };
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let journal =
        String::from_utf8(take(n)?.to_vec()).map_err(|_| bad("journal name not UTF-8"))?;
    let at_ms = i64::from_be_bytes(take(8)?.try_into().expect("8 bytes"));
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let device = String::from_utf8(take(n)?.to_vec()).map_err(|_| bad("device id not UTF-8"))?;
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let mut lines = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        lines.push(hex::encode(take(32)?));
    }
    let m = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let mut blobs = Vec::with_capacity(m.min(1 << 16));
    for _ in 0..m {
        let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let s = String::from_utf8(take(n)?.to_vec()).map_err(|_| bad("blob name not UTF-8"))?;
        if !crate::checkpoints::journal::is_blob_name(&s) {
            return Err(bad("a blob name that is not a SHA-256"));
        }
        blobs.push(s);
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(LinesTombstone {
        journal,
        at_ms,
        device,
        lines,
        blobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::TEST_IDENTITY;

    fn fixture() -> (SyncKeys, Identity, LinesTombstone) {
        let id = Identity::from_secret_str(TEST_IDENTITY).unwrap();
        let t = LinesTombstone {
            journal: "laptop-5zb7x0qa".into(),
            at_ms: 1_700_000_000_000,
            device: "dev-a".into(),
            lines: vec!["ab".repeat(32), "cd".repeat(32)],
            blobs: vec!["e".repeat(64)],
        };
        (SyncKeys::derive(&id), id, t)
    }

    #[test]
    fn opens_under_its_ids_and_nowhere_else() {
        let (keys, id, t) = fixture();
        let (stream, entry) = t.ids(&keys).unwrap();
        let sealed = t.seal(&keys, &id).unwrap();
        let ids = [entry.clone()];
        assert_eq!(
            LinesTombstone::open(&keys, &id, &stream, &ids, &sealed).unwrap(),
            t
        );
        assert_eq!(stream, keys.journal_stream_key("laptop-5zb7x0qa"));
        let other = keys.journal_stream_key("desk-00000000");
        assert!(matches!(
            LinesTombstone::open(&keys, &id, &other, &ids, &sealed),
            Err(LinesTombstoneError::Mac)
        ));
        let forged = t.seal(&keys.with_other_mac_key(), &id).unwrap();
        assert!(matches!(
            LinesTombstone::open(&keys, &id, &stream, &ids, &forged),
            Err(LinesTombstoneError::Mac)
        ));
        // Another forget of other lines gets another entry id.
        let more = LinesTombstone {
            lines: vec!["ef".repeat(32)],
            ..t.clone()
        };
        assert_ne!(more.ids(&keys).unwrap().1, entry);
    }
}
