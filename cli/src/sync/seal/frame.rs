//! The frame of a small sealed record that is not a segment (a session's
//! tombstone, a forget of checkpoint lines): a body its format defines,
//! sealed to the identity and MAC-bound to its kind and the ids it is
//! stored under.
//!
//! ```text
//! ciphertext = age(plaintext)            one X25519 stanza, the identity's own
//! plaintext  = magic[6] || u8 version || body || mac[32]
//! mac        = HMAC-SHA256(segment MAC key, lp(domain) || u8 version
//!              || lp(kind) || body || lp(stream id) || lp(entry id))
//! ```
//!
//! `lp(x) = u32 big-endian len(x) || x`. Each format names its magic,
//! version, MAC domain and size bound ([`Frame`]), parses its own body, and
//! checks that the ids the body derives are the ids it was stored under.

use std::io::{Read, Write};
use std::iter;

use evi_shared::KeyedId;
use hmac::Mac;

use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::{HmacSha256, SyncKeys};

/// What a format puts in its frame.
pub struct Frame {
    pub magic: &'static [u8; 6],
    pub version: u8,
    pub mac_domain: &'static [u8],
    /// The most plaintext an open reads (a body the format never writes
    /// larger is refused as too large, without reading on).
    pub max_plaintext: u64,
    /// Said when the magic is not this format's (`"not a tombstone"`).
    pub not_this: &'static str,
}

/// Why a frame did not seal or open; each format words them its own way.
#[derive(Debug)]
pub enum FrameError {
    Decrypt(String),
    Malformed(&'static str),
    Mac,
    Encrypt(String),
}

/// Appends `lp(b)` to `out`.
pub fn lp(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

impl Frame {
    fn mac_state(
        &self,
        keys: &SyncKeys,
        kind: &str,
        body: &[u8],
        stream: &KeyedId,
        entry: &KeyedId,
    ) -> HmacSha256 {
        let mut m = keys.segment_mac();
        let mut head = Vec::new();
        lp(&mut head, self.mac_domain);
        head.push(self.version);
        lp(&mut head, kind.as_bytes());
        m.update(&head);
        m.update(body);
        let mut tail = Vec::new();
        lp(&mut tail, stream.as_str().as_bytes());
        lp(&mut tail, entry.as_str().as_bytes());
        m.update(&tail);
        m
    }

    /// `body` framed, MAC'd for `kind`, `stream` and `entry`, and sealed.
    pub fn seal(
        &self,
        keys: &SyncKeys,
        identity: &Identity,
        kind: &str,
        body: &[u8],
        stream: &KeyedId,
        entry: &KeyedId,
    ) -> Result<Vec<u8>, FrameError> {
        let mut plain = Vec::with_capacity(body.len() + 40);
        plain.extend_from_slice(self.magic);
        plain.push(self.version);
        plain.extend_from_slice(body);
        plain.extend_from_slice(
            &self
                .mac_state(keys, kind, body, stream, entry)
                .finalize()
                .into_bytes(),
        );
        let enc = age::Encryptor::with_recipients(iter::once(
            identity.recipient() as &dyn age::Recipient
        ))
        .map_err(|e| FrameError::Encrypt(e.to_string()))?;
        let run = || -> std::io::Result<Vec<u8>> {
            let mut w = enc.wrap_output(Vec::new())?;
            w.write_all(&plain)?;
            w.finish()
        };
        run().map_err(|e| FrameError::Encrypt(e.to_string()))
    }

    /// Opens a record stored under `stream`, `kind` and `entry_ids`: age
    /// (at most [`Frame::max_plaintext`] read), the magic and version, one
    /// entry id, and the MAC. Returns the body and that entry id; the
    /// caller parses the body and checks the ids it derives.
    pub fn open<'a>(
        &self,
        keys: &SyncKeys,
        identity: &Identity,
        kind: &str,
        stream: &KeyedId,
        entry_ids: &'a [KeyedId],
        ciphertext: &[u8],
    ) -> Result<(Vec<u8>, &'a KeyedId), FrameError> {
        let dec = age::Decryptor::new_buffered(ciphertext)
            .map_err(|e| FrameError::Decrypt(e.to_string()))?;
        let r = dec
            .decrypt(iter::once(identity.age_identity() as &dyn age::Identity))
            .map_err(|e| FrameError::Decrypt(e.to_string()))?;
        let mut plain = Vec::new();
        r.take(self.max_plaintext + 1)
            .read_to_end(&mut plain)
            .map_err(|e| FrameError::Decrypt(e.to_string()))?;
        let bad = FrameError::Malformed;
        if plain.len() as u64 > self.max_plaintext {
            return Err(bad("too large"));
        }
        let rest = plain.strip_prefix(self.magic).ok_or(bad(self.not_this))?;
        let (&version, rest) = rest.split_first().ok_or(bad("cut short"))?;
        if version != self.version {
            return Err(bad("unknown version (upgrade evi)"));
        }
        if rest.len() < 32 {
            return Err(bad("cut short"));
        }
        let (body, tag) = rest.split_at(rest.len() - 32);
        let [entry_id] = entry_ids else {
            return Err(bad("stored with other than one entry id"));
        };
        self.mac_state(keys, kind, body, stream, entry_id)
            .verify_slice(tag)
            .map_err(|_| FrameError::Mac)?;
        Ok((body.to_vec(), entry_id))
    }
}
