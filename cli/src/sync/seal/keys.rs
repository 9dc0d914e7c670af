//! Keys derived from the identity, and the keyed ids the server sees.
//!
//! # Derivation
//!
//! Input keying material is the raw 32-byte X25519 secret of the identity
//! (the bytes inside its `AGE-SECRET-KEY-1…` Bech32 string). Each key is
//! `HKDF-SHA256(salt = "evi-sync-v1", ikm = secret, info = <label>, L = 32)`
//! with these ASCII labels:
//!
//! | key               | info label            | use                              |
//! |-------------------|-----------------------|----------------------------------|
//! | keyed-id key      | `evi-sync-v1 keyed-id`  | HMAC key for every [`KeyedId`]   |
//! | segment MAC key   | `evi-sync-v1 segment-mac` | HMAC key for segment MACs       |
//! | key check value   | `evi-sync-v1 key-check` | stored on the server as is       |
//! | key proof         | `evi-sync-v1 key-proof` | server keeps its SHA-256 only    |
//!
//! Blobs need no MAC key: a blob is stored under `blob_key(sha256)` and its
//! plaintext must hash to that SHA-256 after decryption, so a server can
//! neither swap nor forge one without knowing the content and the id key.
//!
//! The key check value (KCV) is 32 bytes, sent as 64 lowercase hex. It is a
//! PRF output, independent of the other keys, so it reveals nothing about
//! them or the identity; a device compares it (in constant time) with its own
//! to learn whether it holds the account's identity.
//!
//! The key proof is another such output, sent (as 64 lowercase hex, in the
//! `evi-key-proof` header) only on the calls that change the account's
//! history or key (forgets and their undo, damage reports, a rotation's
//! begin and commit, a device made by pairing); the server keeps its
//! SHA-256 and refuses those calls without it, so a device token that
//! leaks without the key cannot undo what the key's holder did. Unlike the
//! check value, which anyone holding a token may read, the server never
//! gives the proof out.
//!
//! # Keyed ids
//!
//! `KeyedId = lowercase hex(HMAC-SHA256(keyed-id key, msg))` where `msg` is a
//! sequence of length-prefixed fields, `lp(x) = u32 big-endian len(x) || x`:
//!
//! | id                              | msg                                                         |
//! |---------------------------------|-------------------------------------------------------------|
//! | `session_key(s)`                | `lp("session") lp(s)`                                       |
//! | `entry_key(s, e)`               | `lp("entry") lp(s) lp(e)`                                   |
//! | `blob_key(h)`                   | `lp("blob") lp(h)` (`h`: 64 lowercase hex SHA-256)           |
//! | `blob_part_key(h, i, c)`        | `lp("blob-part") lp(h) lp(u64 big-endian i) lp(u64 big-endian c)` |
//! | `blob_manifest_key(h)`          | `lp("blob-manifest") lp(h)`                                 |
//! | `journal_stream_key(d)`         | `lp("journal-stream") lp(d)`                                |
//! | `journal_line_key(d, l)`        | `lp("journal-line") lp(d) lp(l)`                            |
//! | `journal_entry_key(d, n)`       | `lp("journal-entry") lp(d) lp(u64 big-endian n)` (format 1) |
//!
//! Strings are their UTF-8 bytes; `s` a session id, `e` an entry id, `d` a
//! journal's name, `l` a journal line's raw bytes (without its newline), `n`
//! a journal sequence number. A journal line is identified by its journal and
//! its content (`journal_line_key`), never by its position: a rewind trims
//! the journal and the lines after it reuse numbers. `journal_entry_key` is
//! how segment format 1 named lines; it is kept to open those records.
//!
//! A blob larger than the server's blob limit is stored in parts (see
//! `blob_transfer`): `i` is a part's index from 0 and `c` the number of
//! parts, so a blob split another way gets other names and parts of two
//! splits never mix; the manifest naming the split has its own domain.

use std::fmt;

use evi_shared::{KeyedId, SessionId};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::sync::seal::identity::Identity;

pub(crate) type HmacSha256 = Hmac<Sha256>;

const HKDF_SALT: &[u8] = b"evi-sync-v1";
const INFO_KEYED_ID: &[u8] = b"evi-sync-v1 keyed-id";
const INFO_SEGMENT_MAC: &[u8] = b"evi-sync-v1 segment-mac";
const INFO_KEY_CHECK: &[u8] = b"evi-sync-v1 key-check";
const INFO_KEY_PROOF: &[u8] = b"evi-sync-v1 key-proof";

/// The keys sync derives from one identity. Cheap to clone; zeroed on drop.
#[derive(Clone)]
pub struct SyncKeys {
    id_key: Zeroizing<[u8; 32]>,
    segment_mac_key: Zeroizing<[u8; 32]>,
    kcv: [u8; 32],
    proof: Zeroizing<[u8; 32]>,
}

impl fmt::Debug for SyncKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SyncKeys { .. }")
    }
}

impl SyncKeys {
    /// Derives all keys from the identity.
    pub fn derive(identity: &Identity) -> Self {
        Self::from_secret(&identity.secret_bytes())
    }

    fn from_secret(secret: &[u8; 32]) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(HKDF_SALT), secret);
        let expand = |info: &[u8]| {
            let mut out = Zeroizing::new([0u8; 32]);
            hk.expand(info, out.as_mut())
                .expect("32 bytes is a valid HKDF-SHA256 length");
            out
        };
        Self {
            id_key: expand(INFO_KEYED_ID),
            segment_mac_key: expand(INFO_SEGMENT_MAC),
            kcv: *expand(INFO_KEY_CHECK),
            proof: expand(INFO_KEY_PROOF),
        }
    }

    /// The key check value to store with the account.
    pub fn key_check_value(&self) -> [u8; 32] {
        self.kcv
    }

    /// The key check value as 64 lowercase hex characters.
    pub fn key_check_hex(&self) -> String {
        hex::encode(self.kcv)
    }

    /// The key proof as the header carries it: 64 lowercase hex.
    pub fn key_proof_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(*self.proof))
    }

    /// The SHA-256 of the key proof: what the server keeps.
    pub fn key_proof_hash(&self) -> [u8; 32] {
        use sha2::Digest as _;
        Sha256::digest(*self.proof).into()
    }

    /// Whether `stored` (raw bytes or their hex text, as the server returned
    /// them) is this identity's key check value. Constant time in the content.
    pub fn matches_key_check(&self, stored: &[u8]) -> bool {
        let hex_form = self.key_check_hex();
        ct_eq(stored, &self.kcv) || ct_eq(stored, hex_form.as_bytes())
    }

    /// The stream id of a session's entry segments.
    pub fn session_key(&self, session: &SessionId) -> KeyedId {
        self.keyed(&[b"session", session.as_str().as_bytes()])
    }

    /// The id of one entry of a session.
    pub fn entry_key(&self, session: &SessionId, entry_id: &str) -> KeyedId {
        self.stream_entry_key(session.as_str(), entry_id)
    }

    /// The stream id of a session by its stream name
    /// ([`crate::source::StreamName`]; an eVi session's is its bare id, so
    /// this is [`Self::session_key`] for those).
    pub fn stream_key(&self, stream: &str) -> KeyedId {
        self.keyed(&[b"session", stream.as_bytes()])
    }

    /// [`Self::entry_key`] by stream name.
    pub fn stream_entry_key(&self, stream: &str, entry_id: &str) -> KeyedId {
        self.keyed(&[b"entry", stream.as_bytes(), entry_id.as_bytes()])
    }

    /// The stored name of a blob, from its lowercase hex SHA-256 name.
    pub fn blob_key(&self, sha256_hex: &str) -> KeyedId {
        debug_assert!(
            sha256_hex.len() == 64
                && sha256_hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "blob names are 64 lowercase hex"
        );
        self.keyed(&[b"blob", sha256_hex.as_bytes()])
    }

    /// The stored name of part `index` of `count` of a blob too large for the
    /// server's blob limit.
    pub fn blob_part_key(&self, sha256_hex: &str, index: u64, count: u64) -> KeyedId {
        self.keyed(&[
            b"blob-part",
            sha256_hex.as_bytes(),
            &index.to_be_bytes(),
            &count.to_be_bytes(),
        ])
    }

    /// The stored name of the manifest of a blob stored in parts: uploaded
    /// after every part, so its presence means the parts are all there.
    pub fn blob_manifest_key(&self, sha256_hex: &str) -> KeyedId {
        self.keyed(&[b"blob-manifest", sha256_hex.as_bytes()])
    }

    /// The stream id of a device's checkpoint journal.
    pub fn journal_stream_key(&self, device: &str) -> KeyedId {
        self.keyed(&[b"journal-stream", device.as_bytes()])
    }

    /// The id of one journal line, from its journal and its content.
    pub fn journal_line_key(&self, journal: &str, line: &[u8]) -> KeyedId {
        self.keyed(&[b"journal-line", journal.as_bytes(), line])
    }

    /// The id of one journal line by its number, as segment format 1 named
    /// lines (kept to open those records).
    pub fn journal_entry_key(&self, device: &str, seq: u64) -> KeyedId {
        self.keyed(&[b"journal-entry", device.as_bytes(), &seq.to_be_bytes()])
    }

    /// Raw-bytes form of the session/entry keys, for checking segments whose
    /// inner strings have not been validated yet.
    pub(crate) fn keyed_raw(&self, fields: &[&[u8]]) -> KeyedId {
        self.keyed(fields)
    }

    fn keyed(&self, fields: &[&[u8]]) -> KeyedId {
        let mut mac = HmacSha256::new_from_slice(self.id_key.as_ref()).expect("any key length");
        for f in fields {
            mac.update(&(f.len() as u32).to_be_bytes());
            mac.update(f);
        }
        KeyedId::from_bytes(mac.finalize().into_bytes().into())
    }

    /// A fresh HMAC under the segment MAC key.
    pub(crate) fn segment_mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(self.segment_mac_key.as_ref()).expect("any key length")
    }

    /// Test-only: keys with the same keyed-id key but another MAC key, as an
    /// attacker holding the recipient but not the identity would have at best.
    #[cfg(test)]
    pub(crate) fn with_other_mac_key(&self) -> Self {
        let mut k = self.clone();
        k.segment_mac_key = Zeroizing::new([0x42; 32]);
        k
    }

    #[cfg(test)]
    pub(crate) fn raw_keys_hex(&self) -> (String, String) {
        (
            hex::encode(*self.id_key),
            hex::encode(*self.segment_mac_key),
        )
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::TEST_IDENTITY;

    fn keys() -> SyncKeys {
        SyncKeys::derive(&Identity::from_secret_str(TEST_IDENTITY).unwrap())
    }

    #[test]
    fn keys_are_separate_and_deterministic() {
        let k = keys();
        let (id, mac) = k.raw_keys_hex();
        assert_ne!(id, mac);
        assert_ne!(id, k.key_check_hex());
        assert_eq!(keys().key_check_hex(), k.key_check_hex());
        let other = SyncKeys::derive(&Identity::generate());
        assert_ne!(other.key_check_hex(), k.key_check_hex());
    }

    #[test]
    fn key_check_matches_raw_and_hex_only_for_same_identity() {
        let k = keys();
        assert!(k.matches_key_check(&k.key_check_value()));
        assert!(k.matches_key_check(k.key_check_hex().as_bytes()));
        let other = SyncKeys::derive(&Identity::generate());
        assert!(!k.matches_key_check(&other.key_check_value()));
        assert!(!k.matches_key_check(b""));
    }

    #[test]
    fn ids_are_domain_separated_and_length_prefixed() {
        let k = keys();
        let s: SessionId = "s1".parse().unwrap();
        let ids = [
            k.session_key(&s),
            k.entry_key(&s, ""),
            k.journal_stream_key("s1"),
            k.journal_entry_key("s1", 0),
            k.journal_line_key("s1", b""),
            k.journal_line_key("s1", b"{}"),
        ];
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Moving bytes between fields changes the id.
        let ab: SessionId = "ab".parse().unwrap();
        let a: SessionId = "a".parse().unwrap();
        assert_ne!(k.entry_key(&ab, "c"), k.entry_key(&a, "bc"));
        assert_eq!(k.entry_key(&ab, "c"), k.keyed_raw(&[b"entry", b"ab", b"c"]));
    }
}
