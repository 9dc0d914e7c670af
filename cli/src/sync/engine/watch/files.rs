//! The file events `evi sync watch` pushes on: any change under
//! `transcripts/` or `checkpoints/`, through the `notify` crate (inotify,
//! FSEvents, …). Events only say "look again": what is pushed is decided by
//! push itself, which never sends a partial last line, so a missed or an
//! extra event costs at most one look (and the periodic scan catches what
//! no event announced).
//!
//! A watch follows a folder, not its name: `transcripts/` moved away and
//! made again would go unwatched. So every change in the home's own folder
//! looks again at which folder each name stands for, and watches the new
//! one (a push then looks at what it already holds).

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use notify::{EventKind, RecursiveMode, Watcher as _};

use super::Signal;
use crate::home::EviHome;

/// Held while the home is watched.
pub struct FileWatch {
    watcher: notify::RecommendedWatcher,
    dirs: Vec<PathBuf>,
    /// Per folder of `dirs`, which folder is watched under that name.
    watched: Vec<Option<DirId>>,
}

/// Which folder a path names: a folder moved away and one made in its place
/// differ, even if the inode number is used again (then the birth time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirId {
    dev: u64,
    ino: u64,
    born: Option<std::time::SystemTime>,
}

impl DirId {
    fn of(p: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).ok().filter(|m| m.is_dir())?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            born: m.created().ok(),
        })
    }
}

impl FileWatch {
    /// Watches the home's `transcripts/` and `checkpoints/` (and the home
    /// itself, to notice either being created later).
    pub fn start(home: &EviHome, tx: Sender<Signal>) -> notify::Result<Self> {
        let mut dirs = vec![home.transcripts_dir(), home.checkpoints_dir()];
        // The folders of the other agents `[agents]` turns on: their
        // sessions sync too. (One made after the watch starts is watched
        // once the home changes.)
        let config = crate::config::Config::load(&home.config_file())
            .map(|l| l.config)
            .unwrap_or_default();
        for s in crate::source::enabled(&config) {
            dirs.push(s.sessions_dir());
        }
        let root = home.root().to_owned();
        let relevant = dirs.clone();
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            let Ok(ev) = ev else {
                // An overflowed queue lost events: look at everything.
                let _ = tx.send(Signal::Changed);
                return;
            };
            if !counts(&ev.kind) {
                return;
            }
            // An entry of the home itself (`transcripts/` created, say)
            // may be a folder to watch from now on.
            if ev.paths.iter().any(|p| p.parent() == Some(root.as_path())) {
                let _ = tx.send(Signal::HomeChanged);
            }
            let ours = |p: &PathBuf| relevant.iter().any(|d| p.starts_with(d));
            if ev.paths.iter().any(ours) {
                let _ = tx.send(Signal::Changed);
            }
        })?;
        let mut me = Self {
            watcher,
            watched: vec![None; dirs.len()],
            dirs,
        };
        me.watcher.watch(home.root(), RecursiveMode::NonRecursive)?;
        me.watch_new_dirs()?;
        Ok(me)
    }

    /// Watches the folders that exist now under each name and were not
    /// watched yet (made, or made again after a move); whether one was
    /// added (its files may predate the watch).
    pub fn watch_new_dirs(&mut self) -> notify::Result<bool> {
        let mut added = false;
        for (dir, watched) in self.dirs.iter().zip(self.watched.iter_mut()) {
            let now = DirId::of(dir);
            if now == *watched {
                continue;
            }
            if watched.take().is_some() {
                // The old folder moved or went: its watch is dropped if the
                // backend still knows it by this name (an error otherwise
                // says only that it does not).
                let _ = self.watcher.unwatch(dir);
            }
            if now.is_some() {
                match self.watcher.watch(dir, RecursiveMode::Recursive) {
                    Ok(()) => {
                        *watched = now;
                        added = true;
                    }
                    // Gone again meanwhile: the next change of the home
                    // looks again.
                    Err(_) if DirId::of(dir).is_none() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(added)
    }
}

/// Whether an event may mean new bytes: not a read or an open (push's own
/// reads must not wake it).
fn counts(kind: &EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}
