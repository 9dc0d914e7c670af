//! Pairing a device by short code: the code, the PAKE and what travels
//! under its key. The server relays opaque bytes (see evi-server's
//! `routes/pairing.rs`); everything here runs on the two devices.
//!
//! **The PAKE is SPAKE2** (`spake2`, RustCrypto, Ed25519 group), chosen
//! over the two CPace crates: `pake-cpace` is one maintainer's port of an
//! early CPace draft and brings `hmac-sha512` and another `getrandom`;
//! `cpace` on crates.io has a single 0.1 release tracking an older Go
//! draft. `spake2` is the one magic-wormhole's Rust port uses, its four
//! dependencies (`curve25519-dalek` 4, `hkdf`, `sha2`, `rand_core`) were all
//! in this workspace already (one new crate in the tree), and it is kept in
//! the RustCrypto PAKEs repository. Its README says it was never audited;
//! what stands in for that here: the code's secret never leaves the
//! devices, each code allows one attempt (the server takes one join per
//! slot), both sides confirm the key before anything secret moves, and
//! the payload is sealed with an AEAD (`chacha20poly1305`, already here
//! through age) under keys derived from the PAKE output with HKDF.
//!
//! **The code** is `N-word-word`: `N` names the server's slot (not secret),
//! the two words (256 each, 16 bits together) are the PAKE password. An
//! attacker gets one online guess per slot, and a wrong guess burns the
//! slot where the user sees it (`evi sync pair` fails), so 16 bits are what
//! magic-wormhole uses too.
//!
//! **The messages**: the creator's offer is its SPAKE2 message; the
//! joiner's hello is its SPAKE2 message, its confirmation (HMAC over both
//! SPAKE2 messages) and its sealed device name; the creator's reply is its
//! own confirmation and the sealed [`Grant`] (identity, account, token).
//! Each seal key seals one message, so a fixed nonce is sound.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use spake2::{Ed25519Group, Identity as PakeId, Password, Spake2};
use zeroize::Zeroizing;

/// The words of a code's secret part: 256, so each is 8 bits.
const WORDS: [&str; 256] = [
    "acid", "acorn", "actor", "adobe", "agent", "alarm", "album", "alley", "alpha", "amber",
    "angle", "ankle", "apple", "apron", "arena", "armor", "arrow", "aspen", "atlas", "attic",
    "audio", "award", "bacon", "badge", "bagel", "baker", "bamboo", "banjo", "barn", "basil",
    "basin", "beach", "beard", "beaver", "bench", "berry", "bison", "blade", "blanket", "bloom",
    "board", "boat", "bonus", "booth", "bottle", "bowl", "brain", "brass", "bread", "brick",
    "bridge", "brook", "broom", "brush", "bucket", "buddy", "bugle", "cabin", "cable", "cactus",
    "camel", "candle", "canoe", "canyon", "carbon", "cargo", "carpet", "castle", "cedar", "cello",
    "chalk", "chapel", "cheese", "cherry", "chess", "chief", "chimney", "cider", "circus",
    "citrus", "clay", "cliff", "clock", "cloud", "clover", "coach", "cobalt", "cocoa", "comet",
    "coral", "cotton", "cougar", "crane", "crater", "crayon", "cricket", "crown", "cube", "cupid",
    "curtain", "cycle", "daisy", "dancer", "delta", "denim", "desert", "diesel", "dingo", "disco",
    "dolphin", "domino", "donkey", "dragon", "drum", "eagle", "easel", "echo", "elbow", "ember",
    "emerald", "engine", "falcon", "fence", "fern", "ferry", "fiddle", "figure", "flame", "flute",
    "focus", "forest", "fossil", "fox", "frost", "fudge", "galaxy", "garden", "garlic", "gecko",
    "ginger", "glacier", "globe", "goat", "gopher", "grape", "gravel", "guitar", "hammer",
    "harbor", "harp", "hazel", "helmet", "heron", "hippo", "honey", "hook", "horizon", "hotel",
    "husky", "igloo", "indigo", "island", "ivory", "jacket", "jaguar", "jasmine", "jelly", "jewel",
    "jigsaw", "jungle", "kayak", "kernel", "kettle", "kiwi", "koala", "ladder", "lagoon",
    "lantern", "laser", "lemon", "lentil", "lily", "lime", "linen", "lizard", "llama", "lobster",
    "locket", "lotus", "lunar", "magnet", "mango", "maple", "marble", "meadow", "melon", "mercury",
    "meteor", "mint", "mirror", "mitten", "monkey", "moose", "mosaic", "motor", "muffin", "nectar",
    "needle", "nickel", "noodle", "nutmeg", "oasis", "ocean", "olive", "onion", "opal", "orange",
    "orbit", "orchid", "otter", "owl", "oyster", "paddle", "panda", "panther", "papaya", "parrot",
    "pasta", "peanut", "pebble", "pelican", "pepper", "piano", "pickle", "pilot", "pine", "pixel",
    "planet", "plum", "pocket", "polar", "pony", "poppy", "potato", "prism", "puffin", "pumpkin",
    "puzzle", "quartz", "quill", "rabbit", "radar", "radish", "raven", "ribbon", "river",
];

/// What both sides feed SPAKE2 as its identity: the protocol and version.
const PAKE_ID: &[u8] = b"evi-sync-pair-v1";

#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("{0:?} is not a pairing code: it looks like 7-apple-river (a number and two words)")]
    BadCode(String),
    #[error("the other device's message is malformed ({0})")]
    Malformed(&'static str),
    #[error("the key confirmation does not match: the code typed was not this pairing's")]
    Mismatch,
    #[error("random numbers are not available: {0}")]
    Random(String),
}

/// A pairing code: the slot's number and the secret words.
#[derive(Clone, PartialEq, Eq)]
pub struct Code {
    pub slot: u32,
    words: Zeroizing<String>,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Code")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.slot, self.words.as_str())
    }
}

/// Fresh secret words: two of [`WORDS`], from the system's randomness.
pub fn new_words() -> Result<Zeroizing<String>, PairError> {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).map_err(|e| PairError::Random(e.to_string()))?;
    Ok(Zeroizing::new(format!(
        "{}-{}",
        WORDS[usize::from(b[0])],
        WORDS[usize::from(b[1])]
    )))
}

impl Code {
    pub fn new(slot: u32, words: Zeroizing<String>) -> Self {
        Self { slot, words }
    }

    /// Reads what a user typed: `7-apple-river`, any case, spaces around
    /// or instead of dashes.
    pub fn parse(s: &str) -> Result<Self, PairError> {
        let bad = || PairError::BadCode(s.trim().to_owned());
        let norm = s.trim().to_ascii_lowercase().replace(' ', "-");
        let parts: Vec<&str> = norm.split('-').filter(|p| !p.is_empty()).collect();
        let [n, w1, w2] = parts.as_slice() else {
            return Err(bad());
        };
        let slot: u32 = n.parse().map_err(|_| bad())?;
        if slot == 0 || !WORDS.contains(w1) || !WORDS.contains(w2) {
            return Err(bad());
        }
        Ok(Self {
            slot,
            words: Zeroizing::new(format!("{w1}-{w2}")),
        })
    }

    pub fn words(&self) -> &str {
        &self.words
    }
}

/// One side's SPAKE2 run, before the other side's message arrived.
pub struct Pake {
    state: Spake2<Ed25519Group>,
    /// This side's SPAKE2 message.
    pub message: Vec<u8>,
}

/// Starts SPAKE2 (symmetric mode: both sides run the same role) with the
/// code's words.
pub fn start(words: &str) -> Pake {
    let (state, message) = Spake2::<Ed25519Group>::start_symmetric(
        &Password::new(words.as_bytes()),
        &PakeId::new(PAKE_ID),
    );
    Pake { state, message }
}

/// The keys both sides derive from the SPAKE2 output and the two messages.
pub struct Keys {
    joiner_confirm: Zeroizing<[u8; 32]>,
    creator_confirm: Zeroizing<[u8; 32]>,
    joiner_seal: Zeroizing<[u8; 32]>,
    creator_seal: Zeroizing<[u8; 32]>,
    /// The creator's offer then the joiner's SPAKE2 message, the transcript
    /// each confirmation covers.
    transcript: Vec<u8>,
}

impl Pake {
    /// Finishes with the other side's message; `offer` and `answer` are
    /// the creator's and the joiner's SPAKE2 messages.
    pub fn finish(self, other: &[u8], offer: &[u8], answer: &[u8]) -> Result<Keys, PairError> {
        let k = Zeroizing::new(
            self.state
                .finish(other)
                .map_err(|_| PairError::Malformed("not a SPAKE2 message"))?,
        );
        let hk = hkdf::Hkdf::<Sha256>::new(Some(PAKE_ID), &k);
        let derive = |label: &str| {
            let mut out = Zeroizing::new([0u8; 32]);
            hk.expand(label.as_bytes(), &mut out[..])
                .expect("32 bytes is a valid HKDF length");
            out
        };
        let mut transcript = offer.to_vec();
        transcript.extend_from_slice(answer);
        Ok(Keys {
            joiner_confirm: derive("joiner confirm"),
            creator_confirm: derive("creator confirm"),
            joiner_seal: derive("joiner seal"),
            creator_seal: derive("creator seal"),
            transcript,
        })
    }
}

fn mac(key: &[u8; 32], transcript: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(transcript);
    m.finalize().into_bytes().to_vec()
}

fn verify(key: &[u8; 32], transcript: &[u8], tag: &[u8]) -> Result<(), PairError> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(transcript);
    m.verify_slice(tag).map_err(|_| PairError::Mismatch)
}

fn seal(key: &[u8; 32], plain: &[u8]) -> Vec<u8> {
    ChaCha20Poly1305::new(Key::from_slice(key))
        .encrypt(Nonce::from_slice(&[0u8; 12]), plain)
        .expect("sealing a small message in memory cannot fail")
}

fn open(key: &[u8; 32], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, PairError> {
    ChaCha20Poly1305::new(Key::from_slice(key))
        .decrypt(Nonce::from_slice(&[0u8; 12]), sealed)
        .map(Zeroizing::new)
        .map_err(|_| PairError::Mismatch)
}

/// Bytes in the JSON of the relayed messages.
mod b64 {
    use super::*;
    pub fn ser<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }
    pub fn de<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        B64.decode(s).map_err(serde::de::Error::custom)
    }
}

/// The joiner's hello, as relayed.
#[derive(Serialize, Deserialize)]
struct HelloWire {
    #[serde(serialize_with = "b64::ser", deserialize_with = "b64::de")]
    pake: Vec<u8>,
    #[serde(serialize_with = "b64::ser", deserialize_with = "b64::de")]
    confirm: Vec<u8>,
    #[serde(serialize_with = "b64::ser", deserialize_with = "b64::de")]
    sealed: Vec<u8>,
}

/// What the joiner says about itself, under the PAKE key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The device name it asks for.
    pub device: String,
}

/// The creator's reply, as relayed.
#[derive(Serialize, Deserialize)]
struct ReplyWire {
    #[serde(serialize_with = "b64::ser", deserialize_with = "b64::de")]
    confirm: Vec<u8>,
    #[serde(serialize_with = "b64::ser", deserialize_with = "b64::de")]
    sealed: Vec<u8>,
}

/// What the creator hands the joiner, under the PAKE key: everything a
/// device needs to sync, so no password is typed and no file carried.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The identity file's text (`AGE-SECRET-KEY-1…`).
    pub identity: String,
    pub user: String,
    pub token: String,
    pub device_id: String,
    pub device_name: String,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("user", &self.user)
            .field("device_id", &self.device_id)
            .field("device_name", &self.device_name)
            .finish_non_exhaustive()
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        self.identity.zeroize();
        self.token.zeroize();
    }
}

/// The joiner's side: with the creator's offer, the hello to send and the
/// keys to read the reply with.
pub fn joiner_hello(
    code: &Code,
    offer: &[u8],
    hello: &Hello,
) -> Result<(Vec<u8>, Keys), PairError> {
    let pake = start(code.words());
    let mine = pake.message.clone();
    let keys = pake.finish(offer, offer, &mine)?;
    let plain = serde_json::to_vec(hello).expect("a hello serializes");
    let wire = HelloWire {
        confirm: mac(&keys.joiner_confirm, &keys.transcript),
        sealed: seal(&keys.joiner_seal, &plain),
        pake: mine,
    };
    Ok((serde_json::to_vec(&wire).expect("a hello serializes"), keys))
}

/// The creator's side: checks the joiner's confirmation (`Mismatch` when
/// its code was not this one) and opens its hello.
pub fn creator_open_hello(pake: Pake, hello: &[u8]) -> Result<(Hello, Keys), PairError> {
    let wire: HelloWire =
        serde_json::from_slice(hello).map_err(|_| PairError::Malformed("hello is not JSON"))?;
    let offer = pake.message.clone();
    let keys = pake.finish(&wire.pake, &offer, &wire.pake)?;
    verify(&keys.joiner_confirm, &keys.transcript, &wire.confirm)?;
    let plain = open(&keys.joiner_seal, &wire.sealed)?;
    let hello = serde_json::from_slice(&plain).map_err(|_| PairError::Malformed("hello"))?;
    Ok((hello, keys))
}

/// The creator's reply carrying `grant`.
pub fn creator_reply(keys: &Keys, grant: &Grant) -> Vec<u8> {
    let plain = Zeroizing::new(serde_json::to_vec(grant).expect("a grant serializes"));
    let wire = ReplyWire {
        confirm: mac(&keys.creator_confirm, &keys.transcript),
        sealed: seal(&keys.creator_seal, &plain),
    };
    serde_json::to_vec(&wire).expect("a reply serializes")
}

/// The joiner's side: checks the creator's confirmation and opens the grant.
pub fn joiner_open_reply(keys: &Keys, reply: &[u8]) -> Result<Grant, PairError> {
    let wire: ReplyWire =
        serde_json::from_slice(reply).map_err(|_| PairError::Malformed("reply is not JSON"))?;
    verify(&keys.creator_confirm, &keys.transcript, &wire.confirm)?;
    let plain = open(&keys.creator_seal, &wire.sealed)?;
    serde_json::from_slice(&plain).map_err(|_| PairError::Malformed("grant"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            identity: "AGE-SECRET-KEY-1XYZ".into(),
            user: "pat".into(),
            token: "evi_t".into(),
            device_id: "d1".into(),
            device_name: "desk".into(),
        }
    }

    #[test]
    fn the_same_code_pairs_and_carries_the_grant_both_ways() {
        let words = new_words().unwrap();
        let code = Code::new(7, words.clone());
        let creator = start(&words);
        let offer = creator.message.clone();
        let hello_in = Hello {
            device: "desk".into(),
        };
        let (hello, jkeys) = joiner_hello(&code, &offer, &hello_in).unwrap();
        let (got, ckeys) = creator_open_hello(creator, &hello).unwrap();
        assert_eq!(got, hello_in);
        let reply = creator_reply(&ckeys, &grant());
        assert_eq!(joiner_open_reply(&jkeys, &reply).unwrap(), grant());
    }

    #[test]
    fn a_wrong_code_is_a_mismatch_on_the_creators_side() {
        let creator = start("apple-river");
        let offer = creator.message.clone();
        let code = Code::parse("7-apple-apron").unwrap();
        let (hello, _) = joiner_hello(&code, &offer, &Hello { device: "x".into() }).unwrap();
        assert!(matches!(
            creator_open_hello(creator, &hello),
            Err(PairError::Mismatch)
        ));
    }

    #[test]
    fn a_reply_under_another_key_is_refused() {
        let creator = start("apple-river");
        let offer = creator.message.clone();
        let code = Code::parse("7-apple-river").unwrap();
        let (hello, jkeys) = joiner_hello(&code, &offer, &Hello { device: "x".into() }).unwrap();
        let (_, _ckeys) = creator_open_hello(creator, &hello).unwrap();
        // Someone else's run of the protocol, with the same words.
        let other = start("apple-river");
        let other_offer = other.message.clone();
        let (h2, _) = joiner_hello(&code, &other_offer, &Hello { device: "x".into() }).unwrap();
        let (_, okeys) = creator_open_hello(other, &h2).unwrap();
        let forged = creator_reply(&okeys, &grant());
        assert!(matches!(
            joiner_open_reply(&jkeys, &forged),
            Err(PairError::Mismatch)
        ));
    }

    #[test]
    fn codes_parse_as_typed_and_print_back() {
        let c = Code::parse("  7-Apple-RIVER ").unwrap();
        assert_eq!(c.to_string(), "7-apple-river");
        assert_eq!(
            Code::parse("12 apple river").unwrap().to_string(),
            "12-apple-river"
        );
        for bad in [
            "",
            "7",
            "7-apple",
            "x-apple-river",
            "0-apple-river",
            "7-apple-nope",
            "7-a-b-c",
        ] {
            assert!(Code::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_word_list_has_256_distinct_words_without_dashes() {
        let set: std::collections::HashSet<_> = WORDS.iter().collect();
        assert_eq!(set.len(), 256);
        assert!(WORDS.iter().all(|w| !w.contains('-') && !w.is_empty()));
    }
}
