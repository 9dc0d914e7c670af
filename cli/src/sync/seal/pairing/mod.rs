//! Pairing a device by short code: the code, the PAKE, and what travels
//! under its key. The server only relays opaque bytes (evi-server's
//! `routes/pairing.rs`); everything here runs on the two devices, and
//! `docs/design/pairing.md` has the whole flow and its threat model.
//!
//! **Why SPAKE2** (`spake2` 0.4, RustCrypto's PAKEs repository, Ed25519
//! group) and not CPace: `pake-cpace` is one maintainer's port of an early
//! CPace draft (its own `hmac-sha512` and a second `getrandom` in the
//! tree); `cpace` has a single 0.1 release tracking an older draft. None of
//! the three has had an audit (spake2's README says so plainly); spake2 is
//! the one magic-wormhole's Rust port runs, it is kept with the other
//! RustCrypto PAKEs, its API is two calls (`start_a`/`start_b`, `finish`),
//! and its dependencies (`curve25519-dalek` 4, `hkdf`, `sha2`,
//! `rand_core`) were in this workspace already. What stands in for the
//! audit: the words never leave the devices, a code allows one attempt
//! (the server takes one join per slot), both sides prove the key before
//! anything secret moves, and what moves is sealed with an AEAD
//! (`chacha20poly1305`, already in the tree through age) under keys HKDF
//! derives from the PAKE output.
//!
//! **Binding.** SPAKE2's identities are account-neutral context strings
//! (protocol, version, side), the same for every account and server. The
//! slot number is allocated by the server after the creator's first
//! message exists, so it is bound one step later: into every derived key
//! and into the transcript both confirmations cover, with both PAKE
//! messages. A relay that moves messages between slots, or replays one,
//! makes the confirmations fail.
//!
//! **Messages** (first byte [`VERSION`]): the creator's offer is its SPAKE2
//! message; the joiner's hello is its SPAKE2 message, its confirmation
//! (HMAC of the transcript) and its sealed [`Hello`]; the creator's reply is
//! its own confirmation and the sealed [`Grant`]. Each seal key seals
//! exactly one message, so a fixed nonce is sound.

mod code;

pub use code::{CODE_WORDS, Code, WORDS, new_words};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use spake2::{Ed25519Group, Identity as PakeId, Password, Spake2};
use zeroize::Zeroizing;

/// The first byte of the hello and the reply.
pub const VERSION: u8 = 1;
const ID_CREATOR: &[u8] = b"evi-sync pair v1: existing device";
const ID_JOINER: &[u8] = b"evi-sync pair v1: new device";
const CONTEXT: &[u8] = b"evi-sync pair v1";
const MAC_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error(
        "{0:?} is not a pairing code: a code is the number and the three words \
         `evi sync pair` printed, like 7-tiger-willow-atlas"
    )]
    BadCode(String),
    #[error("{0:?} is not one of the pairing code's words (check its spelling)")]
    UnknownWord(String),
    #[error("the other device's message is malformed ({0})")]
    Malformed(&'static str),
    #[error("the key confirmation does not match: the code typed was not this pairing's")]
    Mismatch,
    #[error("random numbers are not available: {0}")]
    Random(String),
}

/// What the joiner tells the creator, sealed: the name it asks for, and
/// the device it was before a key rotation (joining again), which the new
/// one replaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// What the creator hands the joiner, sealed: everything `key import` and
/// `login` would have left on it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The `AGE-SECRET-KEY-1…` line.
    pub identity: String,
    pub user: String,
    /// The server as the creator reaches it.
    pub server: String,
    pub token: String,
    pub device_id: String,
    pub device_name: String,
}

impl Drop for Grant {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        self.identity.zeroize();
        self.token.zeroize();
    }
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("user", &self.user)
            .field("server", &self.server)
            .field("device_name", &self.device_name)
            .finish_non_exhaustive()
    }
}

/// The keys both sides derive once the PAKE is done, bound to the slot and
/// both PAKE messages.
pub struct Keys {
    transcript: Vec<u8>,
    confirm_joiner: Zeroizing<[u8; 32]>,
    confirm_creator: Zeroizing<[u8; 32]>,
    seal_joiner: Zeroizing<[u8; 32]>,
    seal_creator: Zeroizing<[u8; 32]>,
}

fn framed(out: &mut Vec<u8>, part: &[u8]) {
    let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
}

impl Keys {
    fn derive(slot: u32, pake_key: &[u8], offer: &[u8], answer: &[u8]) -> Self {
        let mut transcript = CONTEXT.to_vec();
        transcript.extend_from_slice(&slot.to_be_bytes());
        framed(&mut transcript, offer);
        framed(&mut transcript, answer);
        let hk = hkdf::Hkdf::<Sha256>::new(Some(CONTEXT), pake_key);
        let key = |label: &[u8]| {
            let mut info = label.to_vec();
            info.extend_from_slice(&transcript);
            let mut k = Zeroizing::new([0u8; 32]);
            hk.expand(&info, &mut k[..])
                .expect("32 bytes is a valid HKDF-SHA256 length");
            k
        };
        Self {
            confirm_joiner: key(b"confirm new device"),
            confirm_creator: key(b"confirm existing device"),
            seal_joiner: key(b"seal new device"),
            seal_creator: key(b"seal existing device"),
            transcript,
        }
    }

    fn mac(&self, key: &[u8; 32]) -> [u8; MAC_LEN] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        m.update(&self.transcript);
        m.finalize().into_bytes().into()
    }

    fn check(&self, key: &[u8; 32], got: &[u8]) -> Result<(), PairError> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        m.update(&self.transcript);
        m.verify_slice(got).map_err(|_| PairError::Mismatch)
    }

    fn seal(&self, key: &[u8; 32], plain: &[u8]) -> Vec<u8> {
        ChaCha20Poly1305::new(Key::from_slice(key))
            .encrypt(
                Nonce::from_slice(&[0u8; 12]),
                Payload {
                    msg: plain,
                    aad: &self.transcript,
                },
            )
            .expect("sealing into memory does not fail")
    }

    fn open(&self, key: &[u8; 32], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, PairError> {
        ChaCha20Poly1305::new(Key::from_slice(key))
            .decrypt(
                Nonce::from_slice(&[0u8; 12]),
                Payload {
                    msg: sealed,
                    aad: &self.transcript,
                },
            )
            .map(Zeroizing::new)
            .map_err(|_| PairError::Mismatch)
    }

    /// The creator's reply: its confirmation and the sealed grant.
    pub fn seal_reply(&self, grant: &Grant) -> Vec<u8> {
        let plain = Zeroizing::new(serde_json::to_vec(grant).expect("a grant serializes"));
        let mut out = vec![VERSION];
        out.extend_from_slice(&self.mac(&self.confirm_creator));
        out.extend_from_slice(&self.seal(&self.seal_creator, &plain));
        out
    }

    /// The joiner's reading of the reply: the creator's confirmation
    /// checked first, then the grant opened.
    pub fn open_reply(&self, reply: &[u8]) -> Result<Grant, PairError> {
        let (&v, rest) = reply
            .split_first()
            .ok_or(PairError::Malformed("empty reply"))?;
        if v != VERSION {
            return Err(PairError::Malformed("unknown reply version"));
        }
        if rest.len() < MAC_LEN {
            return Err(PairError::Malformed("short reply"));
        }
        let (mac, sealed) = rest.split_at(MAC_LEN);
        self.check(&self.confirm_creator, mac)?;
        let plain = self.open(&self.seal_creator, sealed)?;
        serde_json::from_slice(&plain).map_err(|_| PairError::Malformed("reply does not parse"))
    }
}

/// The existing device's side, between its offer and the joiner's hello.
pub struct Creator {
    pake: Spake2<Ed25519Group>,
    offer: Vec<u8>,
}

impl Creator {
    /// Starts the PAKE with the code's words; the offer goes to the server.
    pub fn start(words: &[u8]) -> Self {
        let (pake, offer) = Spake2::<Ed25519Group>::start_a(
            &Password::new(words),
            &PakeId::new(ID_CREATOR),
            &PakeId::new(ID_JOINER),
        );
        Self { pake, offer }
    }

    pub fn offer(&self) -> &[u8] {
        &self.offer
    }

    /// Finishes the PAKE with the joiner's hello and checks its
    /// confirmation: `Mismatch` when the joiner typed another code.
    pub fn read_hello(self, slot: u32, hello: &[u8]) -> Result<(Keys, Hello), PairError> {
        let (&v, rest) = hello
            .split_first()
            .ok_or(PairError::Malformed("empty hello"))?;
        if v != VERSION {
            return Err(PairError::Malformed("unknown hello version"));
        }
        let (&len, rest) = rest
            .split_first()
            .ok_or(PairError::Malformed("short hello"))?;
        let len = usize::from(len);
        if rest.len() < len + MAC_LEN {
            return Err(PairError::Malformed("short hello"));
        }
        let (answer, rest) = rest.split_at(len);
        let (mac, sealed) = rest.split_at(MAC_LEN);
        // A message SPAKE2 cannot use (wrong length, a reflected offer) is
        // as good as a wrong code: the slot is done either way.
        let key = Zeroizing::new(self.pake.finish(answer).map_err(|_| PairError::Mismatch)?);
        let keys = Keys::derive(slot, &key, &self.offer, answer);
        keys.check(&keys.confirm_joiner, mac)?;
        let plain = keys.open(&keys.seal_joiner, sealed)?;
        let hello = serde_json::from_slice(&plain)
            .map_err(|_| PairError::Malformed("hello does not parse"))?;
        Ok((keys, hello))
    }
}

/// The new device's side: answers the creator's offer with the code's
/// words; the hello goes to the server, the keys read the reply.
pub fn answer(code: &Code, offer: &[u8], hello: &Hello) -> Result<(Keys, Vec<u8>), PairError> {
    let (pake, answer) = Spake2::<Ed25519Group>::start_b(
        &Password::new(code.password()),
        &PakeId::new(ID_CREATOR),
        &PakeId::new(ID_JOINER),
    );
    let key = Zeroizing::new(
        pake.finish(offer)
            .map_err(|_| PairError::Malformed("the offer is no SPAKE2 message"))?,
    );
    let keys = Keys::derive(code.slot, &key, offer, &answer);
    let len = u8::try_from(answer.len()).map_err(|_| PairError::Malformed("long PAKE message"))?;
    let mut out = vec![VERSION, len];
    out.extend_from_slice(&answer);
    out.extend_from_slice(&keys.mac(&keys.confirm_joiner));
    let plain = serde_json::to_vec(hello).expect("a hello serializes");
    out.extend_from_slice(&keys.seal(&keys.seal_joiner, &plain));
    Ok((keys, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            identity: "AGE-SECRET-KEY-1XYZ".into(),
            user: "pat".into(),
            server: "http://127.0.0.1:1".into(),
            token: "evi_t".into(),
            device_id: "d".into(),
            device_name: "phone".into(),
        }
    }

    fn hello() -> Hello {
        Hello {
            device: "phone".into(),
            replaces: None,
        }
    }

    #[test]
    fn the_same_code_pairs_and_the_grant_arrives_whole() {
        let words = new_words().unwrap();
        let creator = Creator::start(words.as_bytes());
        let code = Code::new(7, words.clone());
        let (jkeys, h) = answer(&code, creator.offer(), &hello()).unwrap();
        let (ckeys, got) = creator.read_hello(7, &h).unwrap();
        assert_eq!(got, hello());
        let reply = ckeys.seal_reply(&grant());
        assert_eq!(jkeys.open_reply(&reply).unwrap(), grant());
    }

    #[test]
    fn another_code_or_another_slot_is_a_mismatch_on_the_creator() {
        let creator = Creator::start(b"tiger-willow-atlas");
        let wrong = Code::parse("7-tiger-willow-orca").unwrap();
        let (_, h) = answer(&wrong, creator.offer(), &hello()).unwrap();
        assert!(matches!(
            creator.read_hello(7, &h),
            Err(PairError::Mismatch)
        ));

        let creator = Creator::start(b"tiger-willow-atlas");
        let right = Code::parse("7-tiger-willow-atlas").unwrap();
        let (_, h) = answer(&right, creator.offer(), &hello()).unwrap();
        assert!(matches!(
            creator.read_hello(8, &h),
            Err(PairError::Mismatch)
        ));
    }

    #[test]
    fn a_changed_reply_is_refused() {
        let creator = Creator::start(b"tiger-willow-atlas");
        let code = Code::parse("3-tiger-willow-atlas").unwrap();
        let (jkeys, h) = answer(&code, creator.offer(), &hello()).unwrap();
        let (ckeys, _) = creator.read_hello(3, &h).unwrap();
        let mut reply = ckeys.seal_reply(&grant());
        let last = reply.len() - 1;
        reply[last] ^= 1;
        assert!(matches!(jkeys.open_reply(&reply), Err(PairError::Mismatch)));
        assert!(jkeys.open_reply(&[]).is_err());
        assert!(jkeys.open_reply(&[VERSION, 1, 2]).is_err());
    }

    #[test]
    fn garbage_hellos_are_refused_without_a_panic() {
        let mut zeros = vec![VERSION, 32];
        zeros.resize(100, 0);
        let hellos = [
            vec![],
            vec![VERSION],
            vec![VERSION, 200, 1, 2],
            vec![2, 0],
            zeros,
        ];
        for h in hellos {
            let creator = Creator::start(b"tiger-willow-atlas");
            assert!(creator.read_hello(1, &h).is_err(), "{h:?}");
        }
    }
}
