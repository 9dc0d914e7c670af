//! One record opened under the old identity and sealed again under the
//! new one: the same content (entries, journal lines, tombstone) under the
//! new keyed ids and MAC, and the blobs it names.

use std::str::FromStr as _;

use evi_shared::blob_refs::{FORGET_LINES_KIND, SegmentRefs};
use evi_shared::frames::SegmentHead;

use crate::sync::engine::checkpoint_forget::tombstone::LinesTombstone;
use crate::sync::engine::forget::Tombstone;
use crate::sync::remote::records::{OutSegment, PulledRecord};
use crate::sync::state::pulled_journals::blob_of;
use crate::sync::{Identity, OpenedSegment, SegmentKind, SyncKeys, open, seal, seal_journal};

/// Both identities, with their keys.
pub struct Keys<'a> {
    pub old: &'a Identity,
    pub old_keys: &'a SyncKeys,
    pub new: &'a Identity,
    pub new_keys: &'a SyncKeys,
}

/// A record sealed again, and the SHA-256 names of the blobs it needs.
pub struct Resealed {
    pub segment: OutSegment,
    pub blobs: Vec<String>,
    /// What a forget or undo says (the forget ledger learns it, see
    /// [`super::rotate`]).
    pub tombstone: Option<Tombstone>,
}

/// Why a record could not be carried: nothing is uploaded for it, and the
/// rotation stops before its commit (the old data stays the account's).
#[derive(Debug, thiserror::Error)]
pub enum ResealError {
    #[error("record {seq} does not open with this device's key: {reason}")]
    Open { seq: u64, reason: String },
    #[error("record {seq} could not be sealed under the new key: {reason}")]
    Seal { seq: u64, reason: String },
    #[error("record {seq} is of kind {kind:?}, which this evi does not know (upgrade evi)")]
    UnknownKind { seq: u64, kind: String },
}

/// Opens `r` (every check of a pull) and seals its content again.
pub fn reseal(k: &Keys<'_>, r: &PulledRecord) -> Result<Resealed, ResealError> {
    let h = &r.head;
    let seq = h.seq;
    let open_err = |reason: String| ResealError::Open { seq, reason };
    let seal_err = |reason: String| ResealError::Seal { seq, reason };
    if evi_shared::forget::is_forget_kind(&h.kind) {
        let t = Tombstone::open(
            k.old_keys,
            k.old,
            &h.stream,
            &h.kind,
            &h.entry_ids,
            &r.ciphertext,
        )
        .map_err(|e| open_err(e.to_string()))?;
        let s = t
            .seal(k.new_keys, k.new)
            .map_err(|e| seal_err(e.to_string()))?;
        return Ok(Resealed {
            segment: OutSegment {
                head: SegmentHead {
                    stream: s.stream,
                    kind: s.kind.to_owned(),
                    entry_ids: vec![s.entry_id],
                    refs: SegmentRefs::default(),
                    group: None,
                },
                ciphertext: s.ciphertext,
            },
            blobs: Vec::new(),
            tombstone: Some(t),
        });
    }
    if h.kind == FORGET_LINES_KIND {
        return reseal_lines_forget(k, r);
    }
    let kind = SegmentKind::from_str(&h.kind).map_err(|_| ResealError::UnknownKind {
        seq,
        kind: h.kind.clone(),
    })?;
    let opened = open(
        k.old_keys,
        k.old,
        &h.stream,
        kind,
        &h.entry_ids,
        &r.ciphertext,
    )
    .map_err(|e| open_err(e.to_string()))?;
    let (sealed, blobs) = match opened {
        OpenedSegment::Entries { session, entries } => {
            let blobs = line_blobs(&entries);
            (seal(k.new_keys, k.new, &session, &entries), blobs)
        }
        OpenedSegment::AgentEntries { stream, entries } => {
            let blobs = line_blobs(&entries);
            let name = stream.to_string();
            (
                crate::sync::seal::segment::seal_stream(k.new_keys, k.new, &name, &entries),
                blobs,
            )
        }
        OpenedSegment::Journal { device, lines } => {
            let blobs = lines.iter().filter_map(|l| blob_of(&l.line)).collect();
            (seal_journal(k.new_keys, k.new, &device, &lines), blobs)
        }
    };
    let sealed = sealed.map_err(|e| seal_err(e.to_string()))?;
    Ok(Resealed {
        segment: OutSegment {
            head: SegmentHead {
                stream: sealed.stream,
                kind: sealed.kind.as_str().to_owned(),
                entry_ids: sealed.entry_ids,
                refs: SegmentRefs {
                    refs: sealed.refs,
                    ..SegmentRefs::default()
                },
                group: sealed.group,
            },
            ciphertext: sealed.ciphertext,
        },
        blobs,
        tombstone: None,
    })
}

/// A forget of checkpoint lines, sealed again. Its clear-text `forgets`
/// (keyed ids of the lines it took back) cannot be derived under the new
/// key, as the lines' bytes are gone; nor are they needed: the server
/// deleted those lines' records when the forget first came, so the staged
/// account never holds them. Its blobs are named under the new key, so the
/// server can still collect one a late record brings back.
fn reseal_lines_forget(k: &Keys<'_>, r: &PulledRecord) -> Result<Resealed, ResealError> {
    let h = &r.head;
    let seq = h.seq;
    let t = LinesTombstone::open(k.old_keys, k.old, &h.stream, &h.entry_ids, &r.ciphertext)
        .map_err(|e| ResealError::Open {
            seq,
            reason: e.to_string(),
        })?;
    let seal_err = |e: crate::sync::engine::checkpoint_forget::tombstone::LinesTombstoneError| {
        ResealError::Seal {
            seq,
            reason: e.to_string(),
        }
    };
    let ciphertext = t.seal(k.new_keys, k.new).map_err(seal_err)?;
    let (stream, entry) = t.ids(k.new_keys).map_err(seal_err)?;
    Ok(Resealed {
        segment: OutSegment {
            head: SegmentHead {
                stream,
                kind: FORGET_LINES_KIND.to_owned(),
                entry_ids: vec![entry],
                refs: SegmentRefs {
                    forget_blobs: t.blobs.iter().map(|b| k.new_keys.blob_key(b)).collect(),
                    ..SegmentRefs::default()
                },
                group: None,
            },
            ciphertext,
        },
        blobs: Vec::new(),
        tombstone: None,
    })
}

fn line_blobs(entries: &[crate::sync::Entry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.line_blob.as_ref().map(|b| b.sha256_hex.clone()))
        .collect()
}

/// Opens a staged record under the new identity: the check before the
/// commit that what was uploaded opens.
pub fn open_new(k: &Keys<'_>, r: &PulledRecord) -> Result<(), ResealError> {
    let h = &r.head;
    let err = |reason: String| ResealError::Open { seq: h.seq, reason };
    if evi_shared::forget::is_forget_kind(&h.kind) {
        Tombstone::open(
            k.new_keys,
            k.new,
            &h.stream,
            &h.kind,
            &h.entry_ids,
            &r.ciphertext,
        )
        .map_err(|e| err(e.to_string()))?;
        return Ok(());
    }
    if h.kind == FORGET_LINES_KIND {
        LinesTombstone::open(k.new_keys, k.new, &h.stream, &h.entry_ids, &r.ciphertext)
            .map_err(|e| err(e.to_string()))?;
        return Ok(());
    }
    let kind = SegmentKind::from_str(&h.kind).map_err(|_| ResealError::UnknownKind {
        seq: h.seq,
        kind: h.kind.clone(),
    })?;
    open(
        k.new_keys,
        k.new,
        &h.stream,
        kind,
        &h.entry_ids,
        &r.ciphertext,
    )
    .map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use evi_shared::frames::RecordHead;

    use super::*;
    use crate::sync::JournalLine;
    use crate::sync::engine::forget::Action;

    fn record(seq: u64, head: SegmentHead, ciphertext: Vec<u8>) -> PulledRecord {
        PulledRecord {
            head: RecordHead {
                seq,
                stream: head.stream,
                kind: head.kind,
                entry_ids: head.entry_ids,
                device: None,
            },
            ciphertext,
        }
    }

    #[test]
    fn every_kind_of_record_opens_under_the_new_key_only_and_names_its_blobs() {
        let (old, new) = (Identity::generate(), Identity::generate());
        let (old_keys, new_keys) = (SyncKeys::derive(&old), SyncKeys::derive(&new));
        let k = Keys {
            old: &old,
            old_keys: &old_keys,
            new: &new,
            new_keys: &new_keys,
        };
        let session = "s1".parse().unwrap();
        let entries = vec![crate::sync::Entry {
            id: "e1".into(),
            parent: None,
            day: "2026-06-08".parse().unwrap(),
            line: b"{\"role\":\"user\"}".to_vec(),
            line_blob: None,
        }];
        let s = seal(&old_keys, &old, &session, &entries).unwrap();
        let entries_rec = record(
            1,
            SegmentHead {
                stream: s.stream.clone(),
                kind: "entries".into(),
                entry_ids: s.entry_ids.clone(),
                refs: SegmentRefs::default(),
                group: None,
            },
            s.ciphertext,
        );
        let sha = "ab".repeat(32);
        let line = format!("{{\"seq\":1,\"path\":\"/a\",\"op\":\"write\",\"blob\":\"{sha}\"}}");
        let j = seal_journal(
            &old_keys,
            &old,
            "laptop-0123",
            &[JournalLine {
                seq: 1,
                line: line.into_bytes(),
            }],
        )
        .unwrap();
        let journal_rec = record(
            2,
            SegmentHead {
                stream: j.stream.clone(),
                kind: "journal".into(),
                entry_ids: j.entry_ids.clone(),
                refs: SegmentRefs::default(),
                group: None,
            },
            j.ciphertext,
        );
        let t = Tombstone {
            action: Action::Forget,
            stream: "s1".into(),
            at_ms: 5,
            device: "d".into(),
        }
        .seal(&old_keys, &old)
        .unwrap();
        let tomb_rec = record(
            3,
            SegmentHead {
                stream: t.stream.clone(),
                kind: t.kind.into(),
                entry_ids: vec![t.entry_id.clone()],
                refs: SegmentRefs::default(),
                group: None,
            },
            t.ciphertext,
        );
        let lines = LinesTombstone {
            journal: "laptop-0123".into(),
            at_ms: 6,
            device: "d".into(),
            lines: vec!["cd".repeat(32)],
            blobs: vec![sha.clone()],
        };
        let (stream, entry) = lines.ids(&old_keys).unwrap();
        let lines_rec = record(
            4,
            SegmentHead {
                stream,
                kind: FORGET_LINES_KIND.into(),
                entry_ids: vec![entry],
                refs: SegmentRefs::default(),
                group: None,
            },
            lines.seal(&old_keys, &old).unwrap(),
        );
        let out = reseal(&k, &lines_rec).unwrap();
        assert_eq!(
            out.segment.head.refs.forget_blobs,
            vec![new_keys.blob_key(&sha)],
            "a forget's blobs are named under the new key"
        );
        let out = reseal(&k, &journal_rec).unwrap();
        assert_eq!(
            out.segment.head.refs.refs,
            vec![new_keys.blob_key(&sha)],
            "a journal declares its blob under the new key"
        );
        for (rec, blobs) in [
            (&entries_rec, vec![]),
            (&journal_rec, vec![sha.clone()]),
            (&tomb_rec, vec![]),
            (&lines_rec, vec![]),
        ] {
            let out = reseal(&k, rec).unwrap();
            assert_eq!(out.blobs, blobs);
            assert_ne!(out.segment.head.stream, rec.head.stream, "keyed ids change");
            assert_ne!(out.segment.head.entry_ids, rec.head.entry_ids);
            let again = record(rec.head.seq, out.segment.head, out.segment.ciphertext);
            open_new(&k, &again).unwrap();
            // The old key opens none of it.
            let swapped = Keys {
                old: &new,
                old_keys: &new_keys,
                new: &old,
                new_keys: &old_keys,
            };
            assert!(open_new(&swapped, &again).is_err());
        }
        // A record sealed under another key is refused, not carried.
        let stranger = Identity::generate();
        let sk = SyncKeys::derive(&stranger);
        let foreign = seal(&sk, &stranger, &session, &entries).unwrap();
        let rec = record(
            5,
            SegmentHead {
                stream: foreign.stream,
                kind: "entries".into(),
                entry_ids: foreign.entry_ids,
                refs: SegmentRefs::default(),
                group: None,
            },
            foreign.ciphertext,
        );
        assert!(matches!(
            reseal(&k, &rec),
            Err(ResealError::Open { seq: 5, .. })
        ));
        let mut odd = entries_rec.clone();
        odd.head.kind = "future".into();
        assert!(matches!(
            reseal(&k, &odd),
            Err(ResealError::UnknownKind { .. })
        ));
    }
}
