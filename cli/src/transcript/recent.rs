//! Which session was active last: the newest entry `ts`, then the newest file
//! mtime. Only sessions whose last day folder is one of the two newest are
//! read (an entry's `ts` can run a little ahead of its day folder across time
//! zones, never by days), and of each only its last file.

use std::io;
use std::ops::ControlFlow;
use std::time::SystemTime;

use evi_shared::SessionId;

use super::catalog::Catalog;
use super::line::parse_head;
use super::lines::walk_file;

/// The most recently active session, if there is any.
pub fn most_recent(catalog: &Catalog) -> io::Result<Option<SessionId>> {
    let mut last_days: Vec<_> = catalog
        .sessions
        .values()
        .filter_map(|f| f.last().map(|f| f.day))
        .collect();
    last_days.sort_unstable();
    last_days.dedup();
    let Some(cutoff) = last_days.iter().rev().nth(1).or(last_days.last()).copied() else {
        return Ok(None);
    };
    let mut best: Option<((Option<i64>, SystemTime), &SessionId)> = None;
    for (id, files) in &catalog.sessions {
        let Some(last) = files.last().filter(|f| f.day >= cutoff) else {
            continue;
        };
        let mut newest = None;
        walk_file(&last.path, 0, |_, raw| {
            // A title given later is not activity in the session.
            let head = parse_head(raw);
            if !head.title {
                newest = newest.max(head.ts);
            }
            ControlFlow::Continue(())
        })?;
        let key = (newest, last.mtime);
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, id));
        }
    }
    Ok(best.map(|(_, id)| id.clone()))
}
