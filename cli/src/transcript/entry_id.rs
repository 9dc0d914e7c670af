//! Entry identity, exactly as `DESIGN.md` ("Entry identity") defines it.
//!
//! Every complete, non-blank line of a session is an entry with an id and a
//! parent:
//!
//! - a line that is a JSON object with a string `id` uses it; its `parentId`
//!   (a string, or `null` for a root) is used when the key is present;
//! - otherwise the id is derived like a commit hash:
//!
//!   ```text
//!   id = hex( SHA-256( "evi-entry-v1" 0x00 parent_id 0x00 raw_line_bytes ) )[..32]
//!   ```
//!
//!   where `raw_line_bytes` is the line without its `\n` (a `\r` before it is
//!   kept), and `parent_id` is the UTF-8 text of the parent's id, empty for the
//!   first entry;
//! - the implicit parent of a line is the previous line of the session that
//!   has no `parentId` key. A line that carries `parentId` never becomes an
//!   implicit parent, so branches appended by `evi sync pull` do not disturb
//!   the local chain.
//!
//! Identical histories thus get identical ids on every device. The frozen
//! vectors in `tests/data/entry-ids.json` pin this down for other
//! implementations.

use sha2::{Digest, Sha256};

/// Domain separator of derived entry ids.
const DOMAIN: &[u8] = b"evi-entry-v1";

/// Length in hex characters of a derived id (128 bits).
pub const DERIVED_ID_LEN: usize = 32;

/// Derives the id of a line that carries no explicit `id`.
pub fn derive_id(parent_id: Option<&str>, raw_line: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update([0]);
    h.update(parent_id.unwrap_or("").as_bytes());
    h.update([0]);
    h.update(raw_line);
    let digest = h.finalize();
    hex::encode(&digest[..DERIVED_ID_LEN / 2])
}

/// The `id` and `parentId` fields of a line, as far as the line has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExplicitIds {
    pub id: Option<String>,
    /// `None`: no `parentId` key. `Some(None)`: `"parentId": null` (a root).
    pub parent: Option<Option<String>>,
}

/// Walks a session's lines in reading order and assigns ids and parents.
#[derive(Debug, Default, Clone)]
pub struct IdChain {
    implicit_parent: Option<String>,
}

/// Where an entry sits in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub id: String,
    pub parent: Option<String>,
}

impl IdChain {
    /// Starts a chain whose next implicit parent is `tip` (used by pull to ask
    /// which parent the next appended line would get).
    pub fn starting_at(tip: Option<String>) -> Self {
        Self {
            implicit_parent: tip,
        }
    }

    /// The parent the next line without `parentId` would take.
    pub fn implicit_parent(&self) -> Option<&str> {
        self.implicit_parent.as_deref()
    }

    /// Places the next entry: `raw` is the line without `\n`, `explicit` what
    /// the line itself says about its id and parent.
    pub fn place(&mut self, raw: &[u8], explicit: ExplicitIds) -> Placement {
        let parent = match explicit.parent.clone() {
            Some(p) => p,
            None => self.implicit_parent.clone(),
        };
        let id = match explicit.id {
            Some(id) => id,
            None => derive_id(parent.as_deref(), raw),
        };
        if explicit.parent.is_none() {
            self.implicit_parent = Some(id.clone());
        }
        Placement { id, parent }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_id_matches_design_example() {
        let line = br#"{"role":"user","content":"hello","ts":"2026-06-08T21:14:00Z"}"#;
        assert_eq!(derive_id(None, line), "de2193318933f75500b51acfb7d8f4b8");
    }
}
