//! `$EVI_HOME/sync/trash/`: the files of forgotten sessions, kept
//! [`KEEP_DAYS`] days so a forget can be undone, then removed by the next
//! push or pull.
//!
//! Layout: `trash/<session>/<trashed ms>/<day>/<session>.jsonl`, and beside
//! the day folders `trash.json` ([`TrashMeta`]). Another agent's session
//! (stream `claude-code/<id>`, `codex/<id>`) is `trash/<stream, its / as
//! +>/<trashed ms>/agent/<n>.jsonl`, the list naming where each file was, so
//! an undo puts it back there. Files move by rename (eVi's are in the eVi
//! home, so on its filesystem): nothing is copied, and a killed move leaves
//! each file whole in one place or the other; a forget applied again moves
//! what is left. An agent's folder on another filesystem is copied in
//! (durably) before its file is removed, so a kill leaves a copy too many,
//! never one too few.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use evi_shared::{Day, SessionId};
use serde::{Deserialize, Serialize};

use crate::fsutil::{create_dir_all_durable, replace_file, sync_dir};
use crate::home::EviHome;

/// Days a forgotten session's files stay in the trash.
pub const KEEP_DAYS: i64 = 7;
const META: &str = "trash.json";

/// The trash's clock, in ms since the epoch: when files move in, and what
/// [`purge`] is asked about by push and pull. The system clock (moved by a
/// test's `EVI_TEST_NOW_OFFSET_SECS` in a build with the test hooks, see
/// [`crate::test_hooks`]).
pub fn now_ms() -> i64 {
    let offset = crate::test_hooks::now_offset_secs();
    (chrono::Utc::now().timestamp_millis()).saturating_add(offset.saturating_mul(1000))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrashMeta {
    pub session: String,
    /// When the files moved in, in ms since the epoch (what the 7 days
    /// count from).
    pub trashed_ms: i64,
    /// When the forget was asked for.
    pub at_ms: i64,
    /// The files, as `<day>/<session>.jsonl` under `transcripts/`.
    pub files: Vec<String>,
    /// Another agent's files, with where each was on this device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_files: Vec<AgentTrashed>,
}

/// One file of another agent's session in the trash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentTrashed {
    /// Where it was (and where an undo puts it back).
    pub from: PathBuf,
    /// Its name in the trash folder (`agent/<n>.jsonl`).
    pub name: String,
}

fn root(home: &EviHome) -> PathBuf {
    home.sync_dir().join("trash")
}

/// The trash folder name of a stream: an eVi session's id, another
/// agent's stream name with `+` for `/` (no session id holds a `+`).
pub fn dir_name(stream: &str) -> String {
    stream.replace('/', "+")
}

/// A new folder for `stream` in the trash (not created yet), and its time.
fn new_dir(home: &EviHome, stream: &str) -> (PathBuf, i64) {
    let now = now_ms();
    let base = root(home).join(dir_name(stream));
    // Two forgets within a millisecond (a test, a script): the next number.
    let mut n = now;
    while base.join(n.to_string()).exists() {
        n += 1;
    }
    (base.join(n.to_string()), now)
}

/// Moves `from` to `to` (a new name in the trash, or back): a rename, or
/// on another filesystem a durable copy and then the removal.
fn move_file(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            fs::copy(from, to)?;
            fs::File::open(to)?.sync_all()?;
            if let Some(d) = to.parent() {
                sync_dir(d)?;
            }
            fs::remove_file(from)
        }
        other => other,
    }
}

/// Moves another agent's session files (stream `stream`) into a new
/// folder of the trash; `None` when there is nothing to move.
pub fn move_in_agent(
    home: &EviHome,
    stream: &str,
    files: &[PathBuf],
    at_ms: i64,
) -> io::Result<Option<PathBuf>> {
    if files.is_empty() {
        return Ok(None);
    }
    let (dir, now) = new_dir(home, stream);
    let meta = TrashMeta {
        session: stream.to_owned(),
        trashed_ms: now,
        at_ms,
        files: Vec::new(),
        agent_files: files
            .iter()
            .enumerate()
            .map(|(i, from)| AgentTrashed {
                from: from.clone(),
                name: format!("agent/{i}.jsonl"),
            })
            .collect(),
    };
    create_dir_all_durable(&dir.join("agent"))?;
    replace_file(
        &dir.join(META),
        &serde_json::to_vec_pretty(&meta).map_err(io::Error::other)?,
    )?;
    for f in &meta.agent_files {
        move_file(&f.from, &dir.join(&f.name))?;
        sync_dir(&dir.join("agent"))?;
        if let Some(parent) = f.from.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(Some(dir))
}

/// The files of `session` in the day folders here, in day order.
pub fn session_files(home: &EviHome, session: &SessionId) -> io::Result<Vec<(Day, PathBuf)>> {
    let dir = home.transcripts_dir();
    let read = match fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let name = format!("{session}.jsonl");
    let mut out = Vec::new();
    for ent in read {
        let ent = ent?;
        let Some(day) = ent.file_name().to_str().and_then(|n| n.parse::<Day>().ok()) else {
            continue;
        };
        let path = ent.path().join(&name);
        if path.is_file() {
            out.push((day, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Moves `files` of `session` into a new folder of the trash; `None` when
/// there is nothing to move.
pub fn move_in(
    home: &EviHome,
    session: &SessionId,
    files: &[(Day, PathBuf)],
    at_ms: i64,
) -> io::Result<Option<PathBuf>> {
    if files.is_empty() {
        return Ok(None);
    }
    let (dir, now) = new_dir(home, session.as_str());
    let meta = TrashMeta {
        session: session.to_string(),
        trashed_ms: now,
        at_ms,
        files: files
            .iter()
            .map(|(day, _)| format!("{day}/{session}.jsonl"))
            .collect(),
        agent_files: Vec::new(),
    };
    create_dir_all_durable(&dir)?;
    // The list first: a trash folder always says what it holds.
    replace_file(
        &dir.join(META),
        &serde_json::to_vec_pretty(&meta).map_err(io::Error::other)?,
    )?;
    for ((day, path), rel) in files.iter().zip(&meta.files) {
        let day_dir = dir.join(day.as_str());
        create_dir_all_durable(&day_dir)?;
        fs::rename(path, dir.join(rel))?;
        sync_dir(&day_dir)?;
        if let Some(parent) = path.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(Some(dir))
}

/// The newest trash folder of `stream` (an eVi session's id, or another
/// agent's stream name), with what it holds.
pub fn newest(home: &EviHome, stream: &str) -> io::Result<Option<(PathBuf, TrashMeta)>> {
    Ok(all(home, stream)?.into_iter().next())
}

/// Every trash folder of `stream`, newest first, with what it holds (a
/// session trashed again after its forget: eVi or its agent wrote to it,
/// and a push learned it was forgotten).
pub fn all(home: &EviHome, stream: &str) -> io::Result<Vec<(PathBuf, TrashMeta)>> {
    let mut found: Vec<(i64, PathBuf)> = Vec::new();
    let dir = root(home).join(dir_name(stream));
    let read = match fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for ent in read {
        let ent = ent?;
        if let Some(ms) = ent.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) {
            found.push((ms, ent.path()));
        }
    }
    found.sort();
    found
        .into_iter()
        .rev()
        .map(|(_, path)| {
            let meta = read_meta(&path)?;
            Ok((path, meta))
        })
        .collect()
}

/// The streams the trash holds something of.
pub fn streams(home: &EviHome) -> io::Result<Vec<crate::source::StreamName>> {
    let read = match fs::read_dir(root(home)) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for ent in read {
        let ent = ent?;
        if let Some(s) = ent
            .file_name()
            .to_str()
            .and_then(|n| crate::source::StreamName::parse(&n.replace('+', "/")))
        {
            out.push(s);
        }
    }
    Ok(out)
}

pub fn read_meta(dir: &Path) -> io::Result<TrashMeta> {
    let bytes = fs::read(dir.join(META))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is damaged ({e})", dir.join(META).display()),
        )
    })
}

/// What bringing files back did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Restored {
    pub files: u64,
    /// Files left in the trash because the day folder has a file of that
    /// name again (as `<day>/<session>.jsonl`; another agent's as the path
    /// it had).
    pub kept: Vec<String>,
}

/// Moves the files of the trash folder `dir` back into their day folders,
/// and removes the folder once it is empty.
pub fn restore(home: &EviHome, dir: &Path, meta: &TrashMeta) -> io::Result<Restored> {
    let mut done = Restored::default();
    for rel in &meta.files {
        let from = dir.join(rel);
        if !from.is_file() {
            continue;
        }
        let to = home.transcripts_dir().join(rel);
        if to.exists() {
            done.kept.push(rel.clone());
            continue;
        }
        let parent = to.parent().expect("a day folder");
        create_dir_all_durable(parent)?;
        fs::rename(&from, &to)?;
        sync_dir(parent)?;
        done.files += 1;
    }
    for f in &meta.agent_files {
        let from = dir.join(&f.name);
        if !from.is_file() {
            continue;
        }
        if f.from.exists() {
            done.kept.push(f.from.display().to_string());
            continue;
        }
        let parent = f.from.parent().expect("an agent's session folder");
        create_dir_all_durable(parent)?;
        move_file(&from, &f.from)?;
        sync_dir(parent)?;
        done.files += 1;
    }
    if done.kept.is_empty() {
        fs::remove_dir_all(dir)?;
        remove_if_empty(dir.parent());
    }
    Ok(done)
}

fn remove_if_empty(dir: Option<&Path>) {
    if let Some(d) = dir {
        // Fails (and so keeps the folder) when it holds anything.
        let _ = fs::remove_dir(d);
    }
}

/// Removes trash folders older than [`KEEP_DAYS`] at `now_ms`; how many.
/// A folder whose list cannot be read is left for people to look at.
pub fn purge(home: &EviHome, now_ms: i64) -> io::Result<u64> {
    let keep_ms = KEEP_DAYS * 24 * 3600 * 1000;
    let mut removed = 0;
    let sessions = match fs::read_dir(root(home)) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for s in sessions {
        let s = s?;
        if !s.file_type()?.is_dir() {
            continue;
        }
        for t in fs::read_dir(s.path())? {
            let t = t?;
            let Ok(meta) = read_meta(&t.path()) else {
                continue;
            };
            if now_ms.saturating_sub(meta.trashed_ms) >= keep_ms {
                fs::remove_dir_all(t.path())?;
                removed += 1;
            }
        }
        remove_if_empty(Some(&s.path()));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, EviHome) {
        let t = tempfile::tempdir().unwrap();
        let h = EviHome::new(t.path());
        (t, h)
    }

    fn write(h: &EviHome, day: &str, s: &str, body: &str) {
        let d = h.transcripts_dir().join(day);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(format!("{s}.jsonl")), body).unwrap();
    }

    #[test]
    fn files_go_to_the_trash_and_come_back_whole() {
        let (_t, h) = home();
        write(&h, "2026-01-01", "s1", "a\n");
        write(&h, "2026-01-02", "s1", "b\n");
        write(&h, "2026-01-02", "s2", "other\n");
        let s1: SessionId = "s1".parse().unwrap();
        let files = session_files(&h, &s1).unwrap();
        assert_eq!(files.len(), 2);
        let dir = move_in(&h, &s1, &files, 5).unwrap().unwrap();
        assert!(session_files(&h, &s1).unwrap().is_empty());
        assert!(h.transcripts_dir().join("2026-01-02/s2.jsonl").is_file());
        let (found, meta) = newest(&h, "s1").unwrap().unwrap();
        assert_eq!(found, dir);
        let back = restore(&h, &found, &meta).unwrap();
        assert_eq!(back.files, 2);
        assert_eq!(
            fs::read_to_string(h.transcripts_dir().join("2026-01-01/s1.jsonl")).unwrap(),
            "a\n"
        );
        assert!(newest(&h, "s1").unwrap().is_none());
    }

    #[test]
    fn an_agents_files_go_back_where_they_were() {
        let (t, h) = home();
        let proj = t.path().join("claude/projects/-p");
        fs::create_dir_all(proj.join("c1/subagents")).unwrap();
        let main = proj.join("c1.jsonl");
        let sub = proj.join("c1/subagents/agent-1.jsonl");
        fs::write(&main, "m\n").unwrap();
        fs::write(&sub, "s\n").unwrap();
        let stream = "claude-code/c1";
        move_in_agent(&h, stream, &[main.clone(), sub.clone()], 5)
            .unwrap()
            .unwrap();
        assert!(!main.exists() && !sub.exists());
        assert!(root(&h).join("claude-code+c1").is_dir());
        let (dir, meta) = newest(&h, stream).unwrap().unwrap();
        assert_eq!(restore(&h, &dir, &meta).unwrap().files, 2);
        assert_eq!(fs::read_to_string(&main).unwrap(), "m\n");
        assert_eq!(fs::read_to_string(&sub).unwrap(), "s\n");
        assert!(newest(&h, stream).unwrap().is_none());
    }

    #[test]
    fn the_trash_keeps_seven_days() {
        let (_t, h) = home();
        write(&h, "2026-01-01", "s1", "a\n");
        let s1: SessionId = "s1".parse().unwrap();
        let files = session_files(&h, &s1).unwrap();
        move_in(&h, &s1, &files, 5).unwrap().unwrap();
        let now = chrono::Utc::now().timestamp_millis();
        assert_eq!(purge(&h, now + 6 * 24 * 3600 * 1000).unwrap(), 0);
        assert_eq!(purge(&h, now + 7 * 24 * 3600 * 1000).unwrap(), 1);
        assert!(!root(&h).join("s1").exists());
    }
}
