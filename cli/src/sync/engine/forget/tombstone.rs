//! The tombstone format: a forget (or its undo) of one stream, sealed to
//! the identity and MAC-bound to the ids it is stored under, like a
//! segment (see [`crate::sync::segment`]).
//!
//! ```text
//! ciphertext = age(plaintext)            one X25519 stanza, the identity's own
//! plaintext  = "EVITMB" || u8 version (1) || body || mac[32]
//! body       = u8 action (1 forget | 2 undo) || lp(stream name)
//!              || i64 at (ms since the epoch, when the user asked)
//!              || lp(device id)
//! mac        = HMAC-SHA256(segment MAC key, lp("evi-tombstone-v1") || u8 version
//!              || lp(kind) || body || lp(stream id) || lp(entry id))
//! stream id  = stream_key(stream name)   (the session's own stream)
//! entry id   = keyed(lp("tombstone") lp(stream name) lp(u8 action)
//!                    lp(i64 at) lp(device id))
//! kind       = "forget" | "unforget"     (the record's kind on the wire)
//! ```
//!
//! `lp(x) = u32 big-endian len(x) || x`. The entry id is new for every
//! forget and undo (its time and device), so the server never drops one as
//! known; the MAC binds the kind too, so a server cannot turn a forget into
//! an undo or back, nor move a tombstone to another stream.

use evi_shared::KeyedId;
use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};

use crate::sync::seal::frame::{Frame, FrameError, lp};
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::SyncKeys;

const FRAME: Frame = Frame {
    magic: b"EVITMB",
    version: 1,
    mac_domain: b"evi-tombstone-v1",
    // Far more than any tombstone: a stream name, a device id and a few bytes.
    max_plaintext: 4096,
    not_this: "not a tombstone",
};

/// What a tombstone says.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Forget,
    Undo,
}

impl Action {
    /// The record kind on the wire.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Forget => FORGET_KIND,
            Self::Undo => UNFORGET_KIND,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Forget => 1,
            Self::Undo => 2,
        }
    }

    pub fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            FORGET_KIND => Some(Self::Forget),
            UNFORGET_KIND => Some(Self::Undo),
            _ => None,
        }
    }
}

/// A forget or undo of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub action: Action,
    /// The stream name (an eVi session's bare id).
    pub stream: String,
    /// When the user asked, in ms since the epoch: lines written after it
    /// and never pushed start a new life (see [`super::apply`]).
    pub at_ms: i64,
    /// The server's id of the device that asked.
    pub device: String,
}

/// A tombstone sealed, with the ids it is stored under.
#[derive(Debug, Clone)]
pub struct SealedTombstone {
    pub stream: KeyedId,
    pub entry_id: KeyedId,
    pub kind: &'static str,
    pub ciphertext: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum TombstoneError {
    #[error("tombstone does not decrypt with this identity: {0}")]
    Decrypt(String),
    #[error("tombstone is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "tombstone MAC does not verify: not sealed with this identity's keys, or moved to another stream or kind by the server"
    )]
    Mac,
    #[error("could not encrypt the tombstone: {0}")]
    Encrypt(String),
}

impl From<FrameError> for TombstoneError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Decrypt(e) => Self::Decrypt(e),
            FrameError::Malformed(m) => Self::Malformed(m),
            FrameError::Mac => Self::Mac,
            FrameError::Encrypt(e) => Self::Encrypt(e),
        }
    }
}

impl Tombstone {
    fn body(&self) -> Vec<u8> {
        let mut b = vec![self.action.code()];
        lp(&mut b, self.stream.as_bytes());
        b.extend_from_slice(&self.at_ms.to_be_bytes());
        lp(&mut b, self.device.as_bytes());
        b
    }

    /// The keyed ids the record is stored under.
    pub fn ids(&self, keys: &SyncKeys) -> (KeyedId, KeyedId) {
        let stream = keys.stream_key(&self.stream);
        let entry = keys.keyed_raw(&[
            b"tombstone",
            self.stream.as_bytes(),
            &[self.action.code()],
            &self.at_ms.to_be_bytes(),
            self.device.as_bytes(),
        ]);
        (stream, entry)
    }

    pub fn seal(
        &self,
        keys: &SyncKeys,
        identity: &Identity,
    ) -> Result<SealedTombstone, TombstoneError> {
        let (stream, entry_id) = self.ids(keys);
        let kind = self.action.kind();
        let ciphertext = FRAME.seal(keys, identity, kind, &self.body(), &stream, &entry_id)?;
        Ok(SealedTombstone {
            stream,
            entry_id,
            kind: self.action.kind(),
            ciphertext,
        })
    }

    /// Opens a record stored under `stream`, `kind` and `entry_ids`: age,
    /// the format, the MAC, and that those are the ids it was sealed for.
    pub fn open(
        keys: &SyncKeys,
        identity: &Identity,
        stream: &KeyedId,
        kind: &str,
        entry_ids: &[KeyedId],
        ciphertext: &[u8],
    ) -> Result<Self, TombstoneError> {
        let (body, entry_id) = FRAME.open(keys, identity, kind, stream, entry_ids, ciphertext)?;
        let t = parse_body(&body)?;
        if t.action.kind() != kind {
            return Err(TombstoneError::Mac);
        }
        // The MAC covers the outer ids as given; they must also be the
        // ones this content derives, or a server could replay a tombstone
        // under the id of a later one.
        if t.ids(keys) != (stream.clone(), entry_id.clone()) {
            return Err(TombstoneError::Mac);
        }
        Ok(t)
    }
}

fn parse_body(body: &[u8]) -> Result<Tombstone, TombstoneError> {
    let bad = TombstoneError::Malformed;
    let mut r = body;
    let mut take = |n: usize| -> Result<&[u8], TombstoneError> {
        if r.len() < n {
            return Err(bad("cut short"));
        }
        let (a, b) = r.split_at(n);
        r = b;
        Ok(a)
    };
    let action = match take(1)?[0] {
        1 => Action::Forget,
        2 => Action::Undo,
        _ => return Err(bad("unknown action")),
    };
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let stream = String::from_utf8(take(n)?.to_vec()).map_err(|_| bad("stream name not UTF-8"))?;
    let at_ms = i64::from_be_bytes(take(8)?.try_into().expect("8 bytes"));
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let device = String::from_utf8(take(n)?.to_vec()).map_err(|_| bad("device id not UTF-8"))?;
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Tombstone {
        action,
        stream,
        at_ms,
        device,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::TEST_IDENTITY;

    fn fixture() -> (SyncKeys, Identity, Tombstone) {
        let id = Identity::from_secret_str(TEST_IDENTITY).unwrap();
        let t = Tombstone {
            action: Action::Forget,
            stream: "s1".into(),
            at_ms: 1_700_000_000_000,
            device: "dev-a".into(),
        };
        (SyncKeys::derive(&id), id, t)
    }

    #[test]
    fn a_tombstone_opens_under_the_ids_it_was_sealed_for() {
        let (keys, id, t) = fixture();
        let s = t.seal(&keys, &id).unwrap();
        let opened = Tombstone::open(
            &keys,
            &id,
            &s.stream,
            s.kind,
            std::slice::from_ref(&s.entry_id),
            &s.ciphertext,
        )
        .unwrap();
        assert_eq!(opened, t);
    }

    #[test]
    fn a_server_cannot_move_relabel_or_forge_a_tombstone() {
        let (keys, id, t) = fixture();
        let s = t.seal(&keys, &id).unwrap();
        let ids = [s.entry_id.clone()];
        let other_stream = keys.stream_key("s2");
        assert!(matches!(
            Tombstone::open(&keys, &id, &other_stream, s.kind, &ids, &s.ciphertext),
            Err(TombstoneError::Mac)
        ));
        assert!(matches!(
            Tombstone::open(&keys, &id, &s.stream, UNFORGET_KIND, &ids, &s.ciphertext),
            Err(TombstoneError::Mac)
        ));
        let other_id = [keys.stream_key("x")];
        assert!(Tombstone::open(&keys, &id, &s.stream, s.kind, &other_id, &s.ciphertext).is_err());
        // Someone holding only the recipient seals with another MAC key.
        let forged = t.seal(&keys.with_other_mac_key(), &id).unwrap();
        assert!(matches!(
            Tombstone::open(&keys, &id, &s.stream, s.kind, &ids, &forged.ciphertext),
            Err(TombstoneError::Mac)
        ));
        // Another identity cannot open it at all.
        let stranger = Identity::generate();
        assert!(matches!(
            Tombstone::open(
                &SyncKeys::derive(&stranger),
                &stranger,
                &s.stream,
                s.kind,
                &ids,
                &s.ciphertext
            ),
            Err(TombstoneError::Decrypt(_))
        ));
    }

    #[test]
    fn every_forget_and_undo_gets_its_own_entry_id() {
        let (keys, _, t) = fixture();
        let undo = Tombstone {
            action: Action::Undo,
            ..t.clone()
        };
        let later = Tombstone {
            at_ms: t.at_ms + 1,
            ..t.clone()
        };
        let ids = [t.ids(&keys).1, undo.ids(&keys).1, later.ids(&keys).1];
        assert_ne!(ids[0], ids[1]);
        assert_ne!(ids[0], ids[2]);
        assert_eq!(t.ids(&keys).0, keys.stream_key("s1"));
    }
}
