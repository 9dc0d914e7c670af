//! The pairing code: `N-word-word-word`. `N` is the server's slot number
//! (not secret: it only routes); the three words are the PAKE password and
//! never leave the two devices.
//!
//! The words are the 256 "even" words of the PGP word list (Patrick Juola
//! and Philip Zimmermann, 1995, placed in the public domain), lowercased:
//! chosen to be told apart when read aloud or mistyped. Each word carries
//! 8 bits, the three 24 bits: an attacker gets one online guess per code
//! (a slot takes one join), so a guess succeeds once in 16.7 million.

use zeroize::Zeroizing;

use super::PairError;

/// How many words a code has.
pub const CODE_WORDS: usize = 3;

/// The PGP word list's even words, lowercased, in its order.
pub const WORDS: [&str; 256] = [
    "aardvark",
    "absurd",
    "accrue",
    "acme",
    "adrift",
    "adult",
    "afflict",
    "ahead",
    "aimless",
    "algol",
    "allow",
    "alone",
    "ammo",
    "ancient",
    "apple",
    "artist",
    "assume",
    "athens",
    "atlas",
    "aztec",
    "baboon",
    "backfield",
    "backward",
    "banjo",
    "beaming",
    "bedlamp",
    "beehive",
    "beeswax",
    "befriend",
    "belfast",
    "berserk",
    "billiard",
    "bison",
    "blackjack",
    "blockade",
    "blowtorch",
    "bluebird",
    "bombast",
    "bookshelf",
    "brackish",
    "breadline",
    "breakup",
    "brickyard",
    "briefcase",
    "burbank",
    "button",
    "buzzard",
    "cement",
    "chairlift",
    "chatter",
    "checkup",
    "chisel",
    "choking",
    "chopper",
    "christmas",
    "clamshell",
    "classic",
    "classroom",
    "cleanup",
    "clockwork",
    "cobra",
    "commence",
    "concert",
    "cowbell",
    "crackdown",
    "cranky",
    "crowfoot",
    "crucial",
    "crumpled",
    "crusade",
    "cubic",
    "dashboard",
    "deadbolt",
    "deckhand",
    "dogsled",
    "dragnet",
    "drainage",
    "dreadful",
    "drifter",
    "dropper",
    "drumbeat",
    "drunken",
    "dupont",
    "dwelling",
    "eating",
    "edict",
    "egghead",
    "eightball",
    "endorse",
    "endow",
    "enlist",
    "erase",
    "escape",
    "exceed",
    "eyeglass",
    "eyetooth",
    "facial",
    "fallout",
    "flagpole",
    "flatfoot",
    "flytrap",
    "fracture",
    "framework",
    "freedom",
    "frighten",
    "gazelle",
    "geiger",
    "glitter",
    "glucose",
    "goggles",
    "goldfish",
    "gremlin",
    "guidance",
    "hamlet",
    "highchair",
    "hockey",
    "indoors",
    "indulge",
    "inverse",
    "involve",
    "island",
    "jawbone",
    "keyboard",
    "kickoff",
    "kiwi",
    "klaxon",
    "locale",
    "lockup",
    "merit",
    "minnow",
    "miser",
    "mohawk",
    "mural",
    "music",
    "necklace",
    "neptune",
    "newborn",
    "nightbird",
    "oakland",
    "obtuse",
    "offload",
    "optic",
    "orca",
    "payday",
    "peachy",
    "pheasant",
    "physique",
    "playhouse",
    "pluto",
    "preclude",
    "prefer",
    "preshrunk",
    "printer",
    "prowler",
    "pupil",
    "puppy",
    "python",
    "quadrant",
    "quiver",
    "quota",
    "ragtime",
    "ratchet",
    "rebirth",
    "reform",
    "regain",
    "reindeer",
    "rematch",
    "repay",
    "retouch",
    "revenge",
    "reward",
    "rhythm",
    "ribcage",
    "ringbolt",
    "robust",
    "rocker",
    "ruffled",
    "sailboat",
    "sawdust",
    "scallion",
    "scenic",
    "scorecard",
    "scotland",
    "seabird",
    "select",
    "sentence",
    "shadow",
    "shamrock",
    "showgirl",
    "skullcap",
    "skydive",
    "slingshot",
    "slowdown",
    "snapline",
    "snapshot",
    "snowcap",
    "snowslide",
    "solo",
    "southward",
    "soybean",
    "spaniel",
    "spearhead",
    "spellbind",
    "spheroid",
    "spigot",
    "spindle",
    "spyglass",
    "stagehand",
    "stagnate",
    "stairway",
    "standard",
    "stapler",
    "steamship",
    "sterling",
    "stockman",
    "stopwatch",
    "stormy",
    "sugar",
    "surmount",
    "suspense",
    "sweatband",
    "swelter",
    "tactics",
    "talon",
    "tapeworm",
    "tempest",
    "tiger",
    "tissue",
    "tonic",
    "topmost",
    "tracker",
    "transit",
    "trauma",
    "treadmill",
    "trojan",
    "trouble",
    "tumor",
    "tunnel",
    "tycoon",
    "uncut",
    "unearth",
    "unwind",
    "uproot",
    "upset",
    "upshot",
    "vapor",
    "village",
    "virus",
    "vulcan",
    "waffle",
    "wallet",
    "watchword",
    "wayside",
    "willow",
    "woodlark",
    "zulu",
];

/// A pairing code: the slot's number and the secret words.
#[derive(Clone, PartialEq, Eq)]
pub struct Code {
    pub slot: u32,
    words: Zeroizing<String>,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The words are the secret.
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

/// Fresh secret words from the system's randomness (one byte a word, so
/// every word is equally likely).
pub fn new_words() -> Result<Zeroizing<String>, PairError> {
    let mut b = Zeroizing::new([0u8; CODE_WORDS]);
    getrandom::fill(&mut b[..]).map_err(|e| PairError::Random(e.to_string()))?;
    let words: Vec<&str> = b.iter().map(|i| WORDS[usize::from(*i)]).collect();
    Ok(Zeroizing::new(words.join("-")))
}

impl Code {
    pub fn new(slot: u32, words: Zeroizing<String>) -> Self {
        Self { slot, words }
    }

    /// The PAKE password: the words alone (the slot is bound into the
    /// keys, see [`super::Keys`]).
    pub fn password(&self) -> &[u8] {
        self.words.as_bytes()
    }

    /// Reads what a user typed: `7-tiger-willow-atlas`, any case, spaces
    /// around or instead of dashes.
    pub fn parse(s: &str) -> Result<Self, PairError> {
        let bad = || PairError::BadCode(s.trim().to_owned());
        let norm = Zeroizing::new(s.trim().to_ascii_lowercase().replace(' ', "-"));
        let parts: Vec<&str> = norm.split('-').filter(|p| !p.is_empty()).collect();
        let Some((n, words)) = parts.split_first() else {
            return Err(bad());
        };
        if words.len() != CODE_WORDS || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let slot: u32 = n.parse().map_err(|_| bad())?;
        if slot == 0 || slot > evi_shared::limits::PAIR_SLOT_MAX {
            return Err(bad());
        }
        if let Some(w) = words.iter().find(|w| !WORDS.contains(w)) {
            return Err(PairError::UnknownWord((*w).to_owned()));
        }
        Ok(Self {
            slot,
            words: Zeroizing::new(words.join("-")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_list_has_256_distinct_lowercase_words() {
        let set: std::collections::HashSet<_> = WORDS.iter().collect();
        assert_eq!(set.len(), 256);
        assert!(
            WORDS
                .iter()
                .all(|w| w.bytes().all(|b| b.is_ascii_lowercase()))
        );
    }

    #[test]
    fn a_code_reads_back_as_written_however_it_is_typed() {
        let code = Code::new(7, new_words().unwrap());
        assert_eq!(Code::parse(&code.to_string()).unwrap(), code);
        let typed = format!(" {} ", code.to_string().to_uppercase().replace('-', " "));
        assert_eq!(Code::parse(&typed).unwrap(), code);
    }

    #[test]
    fn malformed_codes_are_refused() {
        for bad in [
            "",
            "7",
            "7-tiger-willow",
            "x-tiger-willow-atlas",
            "0-tiger-willow-atlas",
            "+7-tiger-willow-atlas",
            "7-tiger-willow-atlas-orca",
            "1000000-tiger-willow-atlas",
        ] {
            assert!(
                matches!(Code::parse(bad), Err(PairError::BadCode(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Code::parse("7-tiger-willow-atlantis"),
            Err(PairError::UnknownWord(w)) if w == "atlantis"
        ));
    }
}
