//! A set of entry ids held by digest, for the sessions a pull or push keeps
//! in memory whole.
//!
//! An appender knows every id of its session; for a 200 MB session that is
//! 105,000 ids, about 14 MB as `String`s in a hash set (64 hex characters,
//! their allocation and the set's slot each). Held as the first 128 bits of
//! the id's SHA-256 it is under 2 MB. Two different ids share a digest only
//! by a SHA-256 collision on 128 bits, which nobody can produce, so "known"
//! keeps its meaning even for ids a hostile line chose.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

#[derive(Debug, Default, Clone)]
pub struct IdSet(HashSet<u128>);

fn digest(id: &str) -> u128 {
    let d = Sha256::digest(id.as_bytes());
    u128::from_le_bytes(d[..16].try_into().expect("16 bytes"))
}

impl IdSet {
    pub fn contains(&self, id: &str) -> bool {
        self.0.contains(&digest(id))
    }

    /// Whether `id` was new.
    pub fn insert(&mut self, id: &str) -> bool {
        self.0.insert(digest(id))
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_told_apart_by_every_character() {
        let a = "a".repeat(64);
        let mut b = a.clone();
        b.replace_range(63..64, "b");
        let mut s = IdSet::default();
        assert!(s.insert(&a));
        assert!(!s.insert(&a));
        assert!(s.contains(&a));
        assert!(!s.contains(&b));
        assert!(!s.contains(&a[..32]));
        assert_eq!(s.len(), 1);
    }
}
