//! Push admission, decided once for every backend: which records of a push
//! are stored under which seq, which are dropped as known or refused, and
//! what a stored record then does to the account, in which order.
//!
//! A backend reads the [`Facts`] inside the push's transaction, then walks
//! the [`Planner`]'s [`Step`]s in order and executes each with its own SQL.
//! The decisions are plain Rust over that data; the one thing the planner
//! learns back while the push runs is what a purge deleted
//! ([`Planner::purged`], [`Planner::superseded`]).
//!
//! # Rules, for each record in push order
//!
//! 1. Its stream was refused over the quota earlier in the push: refused
//!    too ([`PushOutcome::over_quota`]), so a stream never stores a later
//!    segment past a gap.
//! 2. Its stream was refused for a missing blob earlier in the push:
//!    refused too ([`PushOutcome::blob_missing`]); its later segments wait
//!    for the upload (see [`super::blob_refs`]).
//! 3. Its stream or its group is forgotten, as of this point of the push,
//!    and it is content (not a forget or an undo, see
//!    [`super::forget::takes`]): refused ([`PushOutcome::forgotten`]).
//! 4. Every entry id it holds is held already, by a stored record or by an
//!    earlier record of this push: dropped as known (a record without ids
//!    too).
//! 5. It refers to a blob deleted as unreferenced (listed for collection
//!    and not stored again): refused, with its stream's later records.
//! 6. With `per_item`, it does not fit in the quota with what the push
//!    stored before it ([`super::record_cost`]): refused, with its
//!    stream's later records.
//! 7. Otherwise it is stored under the next seq, its ids are held from now
//!    on, and its references to the blobs that are stored go with it. A
//!    forget then purges its stream and group ([`Step::Forget`]), an undo
//!    lifts the mark ([`Step::Unforget`]), a forget of journal lines
//!    deletes the records holding them ([`Step::ForgetLines`]), each right
//!    after its record and before the next record is decided: the ids a
//!    purge deleted are no longer held, so a later record of the same push
//!    that holds them again is stored, not dropped as known and lost.
//!
//! Seqs run on from the account's newest, one for each stored record in
//! push order, none for a dropped or refused one: a puller sees no gap
//! within a push. That commits happen in seq order is each backend's
//! promise (the single writer, the user's row lock). Without `per_item`, a
//! push whose stored records overstep the quota is refused whole
//! ([`StoreError::QuotaExceeded`]) once its records are decided.
//!
//! # After the last record: purges first, then superseded rows
//!
//! When anything was stored, the damaged rows whose every entry is held
//! now are dropped ([`Step::DropSuperseded`]), after every purge of the
//! push. A damaged row goes because other records hold its entries; only
//! once the forgets have run does the transaction know which records stay.
//! Dropped before them, a damaged row whose entries only a record this
//! push then forgets held would go too, and its entries with nothing
//! holding them. (SQLite purged inline and dropped after; Postgres dropped
//! first and purged after: issue 45.)

use std::collections::{BTreeSet, HashSet};

use evi_shared::KeyedId;
use evi_shared::blob_refs::FORGET_LINES_KIND;
use evi_shared::forget::{FORGET_KIND, UNFORGET_KIND};

use super::forget::{Purged, takes};
use super::{NewRecord, PushOutcome, StoreError, StoreResult, record_cost};

/// An entry id as stores index it: its raw 32 MAC bytes.
pub type EntryKey = [u8; 32];

/// What a backend reads in the push's transaction before planning.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The account's newest seq.
    pub newest_seq: i64,
    /// What the account stores, as the quota counts it.
    pub bytes_used: i64,
    pub quota: Option<u64>,
    /// Refuse what does not fit record by record rather than the whole push.
    pub per_item: bool,
    /// Of the push's entry ids ([`entry_keys`]), those some stored record
    /// holds; [`held_among`] asks for no more than the plan needs.
    pub held: HashSet<EntryKey>,
    /// Of the push's streams and groups ([`streams`]), the forgotten ones.
    pub forgotten: HashSet<String>,
    /// Of the blobs the push refers to ([`blob_names`]), those stored (whole
    /// or as a piece tied to them).
    pub stored_blobs: HashSet<String>,
    /// Of those not stored, the ones deleted as unreferenced (listed for
    /// collection).
    pub listed_blobs: HashSet<String>,
}

/// The entry ids of each record, as [`EntryKey`]s.
pub fn entry_keys(records: &[NewRecord]) -> Vec<Vec<EntryKey>> {
    (records.iter())
        .map(|r| r.entry_ids.iter().map(KeyedId::to_bytes).collect())
        .collect()
}

/// The streams and groups of the push: what [`Facts::forgotten`] is about.
pub fn streams(records: &[NewRecord]) -> impl Iterator<Item = &str> {
    (records.iter())
        .flat_map(|r| std::iter::once(&r.stream).chain(&r.group))
        .map(KeyedId::as_str)
}

/// The blobs the push's records refer to: what [`Facts::stored_blobs`] and
/// [`Facts::listed_blobs`] are about.
pub fn blob_names(records: &[NewRecord]) -> impl Iterator<Item = &str> {
    (records.iter()).flat_map(|r| r.refs.refs.iter().map(KeyedId::as_str))
}

/// [`Facts::held`] from one look-up per key, asking no more than the plan
/// needs: a record's keys are asked in turn until one is not held that no
/// earlier record of the push holds (the record is then certainly not all
/// known, whatever the push does before it), so a record of new entries
/// costs one look-up, not one per entry. A backend may as well ask for
/// every key at once.
pub fn held_among<E>(
    keys: &[Vec<EntryKey>],
    mut is_held: impl FnMut(&EntryKey) -> Result<bool, E>,
) -> Result<HashSet<EntryKey>, E> {
    let (mut held, mut not_held, mut earlier) = (HashSet::new(), HashSet::new(), HashSet::new());
    for record in keys {
        for k in record {
            let known = if held.contains(k) {
                true
            } else if not_held.contains(k) {
                false
            } else if is_held(k)? {
                held.insert(*k);
                true
            } else {
                not_held.insert(*k);
                false
            };
            if !known && !earlier.contains(k) {
                break;
            }
        }
        earlier.extend(record.iter().copied());
    }
    Ok(held)
}

/// A record to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take<'r> {
    /// Its index in the push.
    pub index: usize,
    pub record: &'r NewRecord,
    pub seq: i64,
    /// Its entry ids as its row holds them: their raw bytes, one after
    /// another.
    pub ids: Vec<u8>,
    /// Its ids no record held as far as the facts tell: its rows of the
    /// known ids (insert them skipping one held already; the first record
    /// to hold an id keeps it).
    pub new_ids: Vec<EntryKey>,
    /// The blobs it refers to that are stored: its references.
    pub refs: Vec<&'r KeyedId>,
}

/// What the backend does next, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'r> {
    /// Insert the record's row, its new ids and its blob references.
    Store(Take<'r>),
    /// The forget just stored at `seq`: delete the records of `stream` and
    /// of its group before it (see [`super::forget`]) and mark the stream
    /// forgotten; tell [`Planner::purged`] what went.
    Forget { stream: &'r str, seq: i64 },
    /// The undo just stored: `stream` takes records again.
    Unforget { stream: &'r str },
    /// The forget of journal lines just stored at `seq`: delete the records
    /// of `stream` before it holding any of `forgets` (see
    /// [`super::blob_refs`]) and tell [`Planner::purged`] what went. (The
    /// blobs it names are [`Planner::released`] already; those the deleted
    /// records named are not: the lines kept from them come again.)
    ForgetLines {
        stream: &'r str,
        seq: i64,
        forgets: &'r [KeyedId],
    },
    /// After the last record, when any was stored: delete the damaged rows
    /// whose every entry is held now; tell [`Planner::superseded`] what
    /// went.
    DropSuperseded,
}

/// Why a record was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Known,
    OverQuota,
    BlobMissing,
    Forgotten,
}

/// What the push changes on the account's row, once its steps ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub newest_seq: i64,
    pub records: i64,
    pub entries: i64,
    pub bytes: i64,
}

/// The rules above, record by record (see the module's docs).
#[derive(Debug)]
pub struct Planner<'r> {
    records: &'r [NewRecord],
    keys: Vec<Vec<EntryKey>>,
    facts: Facts,
    next: usize,
    then: Option<Step<'r>>,
    finished: bool,
    seq: i64,
    added: i64,
    over_quota_streams: HashSet<&'r str>,
    blob_missing_streams: HashSet<&'r str>,
    purged: Purged,
    superseded: (i64, i64),
    released: BTreeSet<String>,
    outcome: PushOutcome,
}

impl<'r> Planner<'r> {
    /// `keys`: [`entry_keys`] of `records`.
    pub fn new(records: &'r [NewRecord], keys: Vec<Vec<EntryKey>>, facts: Facts) -> Self {
        assert_eq!(records.len(), keys.len(), "one list of keys per record");
        Self {
            records,
            keys,
            seq: facts.newest_seq,
            facts,
            next: 0,
            then: None,
            finished: false,
            added: 0,
            over_quota_streams: HashSet::new(),
            blob_missing_streams: HashSet::new(),
            purged: Purged::default(),
            superseded: (0, 0),
            released: BTreeSet::new(),
            outcome: PushOutcome {
                stored: 0,
                dropped: 0,
                newest_seq: 0,
                over_quota: Vec::new(),
                forgotten: Vec::new(),
                compact: false,
                blob_missing: Vec::new(),
                collect_blobs: false,
            },
        }
    }

    /// The next step, `None` once every step is given. Without `per_item`,
    /// `QuotaExceeded` after the last record when the push does not fit:
    /// nothing of it may be kept.
    pub fn next_step(&mut self) -> StoreResult<Option<Step<'r>>> {
        if let Some(step) = self.then.take() {
            return Ok(Some(step));
        }
        while self.next < self.records.len() {
            let i = self.next;
            self.next += 1;
            match self.admit(i) {
                Ok(take) => return Ok(Some(Step::Store(take))),
                Err(refusal) => self.refuse(i, refusal),
            }
        }
        if self.finished {
            return Ok(None);
        }
        self.finished = true;
        if let Some(q) = self.facts.quota
            && self.added > 0
            && (self.facts.bytes_used + self.added) as u64 > q
        {
            return Err(StoreError::QuotaExceeded);
        }
        Ok((self.outcome.stored > 0).then_some(Step::DropSuperseded))
    }

    /// Rules 1 to 7 for record `i`.
    fn admit(&mut self, i: usize) -> Result<Take<'r>, Refusal> {
        let r = &self.records[i];
        let stream = r.stream.as_str();
        if self.over_quota_streams.contains(stream) {
            return Err(Refusal::OverQuota);
        }
        if self.blob_missing_streams.contains(stream) {
            return Err(Refusal::BlobMissing);
        }
        let forgotten = |s: &str| self.facts.forgotten.contains(s);
        let gone = forgotten(stream) || r.group.as_ref().is_some_and(|g| forgotten(g.as_str()));
        if !takes(&r.kind, gone) {
            return Err(Refusal::Forgotten);
        }
        let keys = &self.keys[i];
        if keys.iter().all(|k| self.facts.held.contains(k)) {
            return Err(Refusal::Known);
        }
        let stored = |n: &&KeyedId| self.facts.stored_blobs.contains(n.as_str());
        let deleted = |n: &KeyedId| self.facts.listed_blobs.contains(n.as_str());
        if r.refs.refs.iter().any(|n| !stored(&n) && deleted(n)) {
            self.blob_missing_streams.insert(stream);
            return Err(Refusal::BlobMissing);
        }
        let cost = record_cost(r.body.len, r.entry_ids.len()) as i64;
        if self.facts.per_item
            && (self.facts.quota)
                .is_some_and(|q| (self.facts.bytes_used + self.added + cost) as u64 > q)
        {
            self.over_quota_streams.insert(stream);
            return Err(Refusal::OverQuota);
        }
        self.seq += 1;
        self.added += cost;
        self.outcome.stored += 1;
        let new_ids = (keys.iter())
            .filter(|k| self.facts.held.insert(**k))
            .copied()
            .collect();
        self.then = match r.kind.as_str() {
            FORGET_KIND => {
                self.facts.forgotten.insert(stream.to_owned());
                Some(Step::Forget {
                    stream,
                    seq: self.seq,
                })
            }
            UNFORGET_KIND => {
                self.facts.forgotten.remove(stream);
                Some(Step::Unforget { stream })
            }
            FORGET_LINES_KIND => {
                (self.released).extend(r.refs.forget_blobs.iter().map(|n| n.to_string()));
                Some(Step::ForgetLines {
                    stream,
                    seq: self.seq,
                    forgets: &r.refs.forgets,
                })
            }
            _ => None,
        };
        Ok(Take {
            index: i,
            record: r,
            seq: self.seq,
            ids: keys.concat(),
            new_ids,
            refs: r.refs.refs.iter().filter(stored).collect(),
        })
    }

    fn refuse(&mut self, i: usize, why: Refusal) {
        let o = &mut self.outcome;
        match why {
            Refusal::Known => o.dropped += 1,
            Refusal::OverQuota => o.over_quota.push(i as u32),
            Refusal::BlobMissing => o.blob_missing.push(i as u32),
            Refusal::Forgotten => o.forgotten.push(i as u32),
        }
    }

    /// What a [`Step::Forget`] or [`Step::ForgetLines`] deleted: its ids
    /// are no longer held.
    pub fn purged(&mut self, mut purged: Purged) {
        for k in purged.unheld.drain(..) {
            self.facts.held.remove(&k);
        }
        self.purged += purged;
    }

    /// What [`Step::DropSuperseded`] deleted: how many rows, of what cost.
    pub fn superseded(&mut self, rows: i64, bytes: i64) {
        self.superseded = (rows, bytes);
    }

    /// The blobs the push let go of, to list for collection at the end
    /// when nothing refers to them: the backend's purges and superseded
    /// rows add the names their deleted records referred to.
    pub fn released(&mut self) -> &mut BTreeSet<String> {
        &mut self.released
    }

    /// Whether the push stored anything (else nothing is to commit).
    pub fn stored(&self) -> bool {
        self.outcome.stored > 0
    }

    /// The account's new newest seq and what its counters change by, given
    /// the rows of known ids the inserts added.
    pub fn counters(&self, new_entries: i64) -> Counters {
        let (gone, freed) = self.superseded;
        Counters {
            newest_seq: self.seq,
            records: self.outcome.stored as i64 - gone - self.purged.records,
            entries: new_entries - self.purged.entries,
            bytes: self.added - freed - self.purged.bytes,
        }
    }

    /// The answer, once every step ran; `collect_blobs`: whether blobs were
    /// listed for collection.
    pub fn outcome(self, collect_blobs: bool) -> PushOutcome {
        PushOutcome {
            newest_seq: self.seq as u64,
            compact: self.purged.packs,
            collect_blobs,
            ..self.outcome
        }
    }
}

#[cfg(test)]
mod tests {
    use evi_shared::blob_refs::SegmentRefs;

    use super::*;
    use crate::bodies::{BodyRef, PackName};

    fn id(tag: u8, n: u8) -> KeyedId {
        let mut b = [tag; 32];
        b[0] = n;
        KeyedId::from_bytes(b)
    }

    /// A record of stream `stream` holding the entries `entries`, with a
    /// body of `len` bytes.
    fn rec(stream: u8, kind: &str, entries: &[u8], len: u64) -> NewRecord {
        NewRecord {
            device_id: "d".into(),
            stream: id(1, stream),
            kind: kind.into(),
            entry_ids: entries.iter().map(|&e| id(2, e)).collect(),
            refs: SegmentRefs::default(),
            group: None,
            body: BodyRef {
                pack: PackName::new(),
                offset: 0,
                len,
            },
        }
    }

    fn facts(newest_seq: i64) -> Facts {
        Facts {
            newest_seq,
            ..Facts::default()
        }
    }

    fn key(n: u8) -> EntryKey {
        id(2, n).to_bytes()
    }

    /// Every step of a push whose purges delete `purges` (the keys each
    /// purge unholds, in turn) and whose superseded rows cost nothing; the
    /// answer, or the error.
    fn run(
        records: &[NewRecord],
        facts: Facts,
        purges: &[&[u8]],
    ) -> (Vec<Step<'static>>, StoreResult<PushOutcome>) {
        // The steps borrow the records: leak a copy for the test's life.
        let records: &'static [NewRecord] = Vec::leak(records.to_vec());
        let mut plan = Planner::new(records, entry_keys(records), facts);
        let (mut steps, mut purges) = (Vec::new(), purges.iter());
        loop {
            match plan.next_step() {
                Ok(Some(step)) => {
                    if matches!(step, Step::Forget { .. } | Step::ForgetLines { .. }) {
                        let unheld = purges
                            .next()
                            .map_or(vec![], |p| p.iter().map(|&n| key(n)).collect());
                        plan.purged(Purged {
                            entries: unheld.len() as i64,
                            unheld,
                            ..Purged::default()
                        });
                    }
                    steps.push(step);
                }
                Ok(None) => return (steps, Ok(plan.outcome(false))),
                Err(e) => return (steps, Err(e)),
            }
        }
    }

    /// (index, seq) of each record stored.
    fn stored(steps: &[Step<'_>]) -> Vec<(usize, i64)> {
        (steps.iter())
            .filter_map(|s| match s {
                Step::Store(t) => Some((t.index, t.seq)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn seqs_run_on_from_the_newest_without_gaps() {
        let push = [
            rec(1, "entries", &[1], 10),
            rec(1, "entries", &[1], 10),
            rec(2, "entries", &[2], 10),
        ];
        let (steps, outcome) = run(&push, facts(41), &[]);
        assert_eq!(stored(&steps), [(0, 42), (2, 43)]);
        assert_eq!(steps.last(), Some(&Step::DropSuperseded));
        let o = outcome.unwrap();
        assert_eq!((o.stored, o.dropped, o.newest_seq), (2, 1, 43));
    }

    #[test]
    fn a_record_whose_every_id_is_held_is_dropped_one_with_a_new_id_stored() {
        let mut f = facts(0);
        f.held = [key(1), key(2)].into();
        let push = [
            rec(1, "entries", &[1, 2], 10),
            rec(1, "entries", &[2, 3], 10),
            rec(1, "entries", &[], 10),
        ];
        let (steps, outcome) = run(&push, f, &[]);
        assert_eq!(stored(&steps), [(1, 1)]);
        let Step::Store(t) = &steps[0] else { panic!() };
        assert_eq!(t.new_ids, [key(3)], "only the id no record holds");
        assert_eq!(t.ids, [key(2), key(3)].concat());
        assert_eq!(outcome.unwrap().dropped, 2, "no ids at all: nothing new");
    }

    #[test]
    fn nothing_stored_gives_no_step_and_the_newest_seq_as_it_was() {
        let mut f = facts(7);
        f.held = [key(1)].into();
        let (steps, outcome) = run(&[rec(1, "entries", &[1], 10)], f, &[]);
        assert!(steps.is_empty());
        assert_eq!(outcome.unwrap().newest_seq, 7);
    }

    #[test]
    fn a_forgotten_stream_or_group_refuses_content_but_takes_forgets_and_undos() {
        let mut f = facts(0);
        f.forgotten = [id(1, 1).to_string(), id(1, 9).to_string()].into();
        let mut grouped = rec(2, "entries", &[2], 10);
        grouped.group = Some(id(1, 9));
        let push = [
            rec(1, "entries", &[1], 10),
            grouped,
            rec(1, "unforget", &[3], 10),
            rec(1, "entries", &[4], 10),
        ];
        let (steps, outcome) = run(&push, f, &[]);
        assert_eq!(stored(&steps), [(2, 1), (3, 2)]);
        assert!(steps.contains(&Step::Unforget {
            stream: push[0].stream.as_str()
        }));
        assert_eq!(outcome.unwrap().forgotten, [0, 1]);
    }

    #[test]
    fn a_forget_refuses_what_follows_it_and_purges_right_after_its_record() {
        let push = [
            rec(1, "entries", &[1], 10),
            rec(1, "forget", &[2], 10),
            rec(1, "entries", &[3], 10),
            rec(2, "entries", &[4], 10),
        ];
        let (steps, outcome) = run(&push, facts(0), &[&[1]]);
        let s = push[0].stream.as_str();
        assert!(
            matches!(&steps[..], [Step::Store(_), Step::Store(_), Step::Forget { stream, seq: 2 }, Step::Store(_), Step::DropSuperseded] if *stream == s),
            "{steps:?}"
        );
        assert_eq!(outcome.unwrap().forgotten, [2]);
    }

    #[test]
    fn ids_a_purge_deleted_are_taken_again_later_in_the_push() {
        // Stored, forgotten, undone and sent again in one push: the last
        // record holds an id the forget deleted, so it is stored.
        let push = [
            rec(1, "entries", &[1], 10),
            rec(1, "forget", &[2], 10),
            rec(1, "unforget", &[3], 10),
            rec(1, "entries", &[1], 10),
        ];
        let (steps, outcome) = run(&push, facts(0), &[&[1]]);
        assert_eq!(stored(&steps), [(0, 1), (1, 2), (2, 3), (3, 4)]);
        assert_eq!(outcome.unwrap().dropped, 0);
        // Lines forgotten, and the lines kept from their record sent again.
        let mut lines = rec(5, FORGET_LINES_KIND, &[9], 10);
        lines.refs.forgets = vec![id(2, 6)];
        lines.refs.forget_blobs = vec![id(7, 1)];
        let mut f = facts(0);
        f.held = [key(6), key(7)].into();
        let push = [lines, rec(5, "entries", &[7], 10)];
        let (steps, _) = run(&push, f.clone(), &[&[6, 7]]);
        assert_eq!(stored(&steps), [(0, 1), (1, 2)]);
        assert!(
            matches!(&steps[1], Step::ForgetLines { seq: 1, forgets, .. } if forgets.len() == 1)
        );
        // The blobs it names are let go of, for collection once unreferenced.
        let mut plan = Planner::new(&push, entry_keys(&push), f);
        while plan.next_step().unwrap().is_some() {}
        assert_eq!(*plan.released(), [id(7, 1).to_string()].into());
    }

    #[test]
    fn a_deleted_blob_refuses_its_record_and_the_streams_later_ones() {
        let (gone, kept, unknown) = (id(7, 1), id(7, 2), id(7, 3));
        let mut f = facts(0);
        f.stored_blobs = [kept.to_string()].into();
        f.listed_blobs = [gone.to_string()].into();
        let mut first = rec(1, "entries", &[1], 10);
        first.refs.refs = vec![kept.clone(), gone];
        let mut other = rec(2, "entries", &[3], 10);
        other.refs.refs = vec![kept.clone(), unknown];
        let push = [first, rec(1, "entries", &[2], 10), other];
        let (steps, outcome) = run(&push, f, &[]);
        assert_eq!(stored(&steps), [(2, 1)]);
        let Step::Store(t) = &steps[0] else { panic!() };
        assert_eq!(t.refs, [&kept], "a blob never stored is no reference");
        assert_eq!(outcome.unwrap().blob_missing, [0, 1]);
    }

    #[test]
    fn per_item_refuses_what_does_not_fit_and_its_streams_later_records() {
        let cost = record_cost(100, 1) as i64;
        let mut f = facts(0);
        f.per_item = true;
        f.bytes_used = 1_000;
        f.quota = Some((1_000 + 2 * cost) as u64);
        let push = [
            rec(1, "entries", &[1], 100),
            rec(2, "entries", &[2], 5_000),
            rec(3, "entries", &[3], 100),
            rec(2, "entries", &[4], 1),
            rec(4, "entries", &[5], 100),
        ];
        let (steps, outcome) = run(&push, f, &[]);
        assert_eq!(stored(&steps), [(0, 1), (2, 2)]);
        assert_eq!(
            outcome.unwrap().over_quota,
            [1, 3, 4],
            "the last no longer fits"
        );
    }

    #[test]
    fn without_per_item_a_push_over_the_quota_is_refused_whole() {
        let mut f = facts(0);
        f.quota = Some(record_cost(100, 1) + 10);
        let push = [rec(1, "entries", &[1], 100), rec(2, "entries", &[2], 100)];
        let (steps, outcome) = run(&push, f.clone(), &[]);
        assert_eq!(stored(&steps).len(), 2, "decided first");
        assert!(matches!(outcome, Err(StoreError::QuotaExceeded)));
        // Nothing stored: nothing over.
        f.held = [key(1), key(2)].into();
        f.bytes_used = 1 << 40;
        assert!(run(&push, f, &[]).1.is_ok());
    }

    #[test]
    fn the_counters_take_off_what_the_purges_and_superseded_rows_freed() {
        let push = [rec(1, "entries", &[1, 2], 100), rec(1, "forget", &[3], 0)];
        let records: &'static [NewRecord] = Vec::leak(push.to_vec());
        let mut plan = Planner::new(records, entry_keys(records), facts(5));
        while let Some(step) = plan.next_step().unwrap() {
            match step {
                Step::Forget { .. } => plan.purged(Purged {
                    records: 1,
                    entries: 2,
                    bytes: record_cost(100, 2) as i64,
                    packs: true,
                    unheld: vec![key(1), key(2)],
                }),
                Step::DropSuperseded => plan.superseded(1, 300),
                _ => {}
            }
        }
        assert_eq!(
            plan.counters(3),
            Counters {
                newest_seq: 7,
                records: 2 - 1 - 1,
                entries: 3 - 2,
                bytes: record_cost(0, 1) as i64 - 300,
            }
        );
        assert!(plan.outcome(true).compact);
    }

    /// The look-ups [`held_among`] skips never change a plan: on pushes of
    /// ids shared within and across records, the plan from its answer is
    /// the plan from every id looked up.
    #[test]
    fn asking_for_fewer_ids_plans_the_same() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as u8
        };
        for _ in 0..2_000 {
            let store: HashSet<EntryKey> = (0..8).filter(|_| next(2) == 0).map(key).collect();
            let push: Vec<NewRecord> = (0..next(6))
                .map(|_| {
                    let ids: Vec<u8> = (0..next(4)).map(|_| next(8)).collect();
                    let kind = ["entries", "entries", "forget", "unforget"][next(4) as usize];
                    rec(next(2), kind, &ids, 10)
                })
                .collect();
            let keys = entry_keys(&push);
            let mut asked = 0;
            let few = held_among(&keys, |k| {
                asked += 1;
                Ok::<_, ()>(store.contains(k))
            })
            .unwrap();
            assert!(few.is_subset(&store));
            let plan = |held: HashSet<EntryKey>| {
                let mut f = facts(0);
                f.held = held;
                // Each purge deletes the ids 0 and 1.
                run(
                    &push,
                    f,
                    &[&[0, 1], &[0, 1], &[0, 1], &[0, 1], &[0, 1], &[0, 1]],
                )
            };
            let (mut a, b) = (plan(few), plan(store.clone()));
            // Past a record's first new id, ids are not asked: they come as
            // new, and the insert skips the ones held.
            for (a, b) in a.0.iter_mut().zip(&b.0) {
                if let (Step::Store(a), Step::Store(b)) = (a, b) {
                    assert!(b.new_ids.iter().all(|k| a.new_ids.contains(k)));
                    a.new_ids.retain(|k| b.new_ids.contains(k));
                }
            }
            assert_eq!(a.0, b.0, "{push:?}");
            assert_eq!(a.1.unwrap(), b.1.unwrap());
        }
    }

    #[test]
    fn a_record_of_new_ids_costs_one_look_up() {
        let push = [
            rec(1, "entries", &[1, 2, 3], 10),
            rec(1, "entries", &[4, 5], 10),
        ];
        let mut asked = 0;
        held_among(&entry_keys(&push), |_| {
            asked += 1;
            Ok::<_, ()>(false)
        })
        .unwrap();
        assert_eq!(asked, 2);
    }
}
