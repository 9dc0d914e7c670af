//! The names an archive may hold: a data folder's own layout and nothing
//! else, so that what `restore` writes is decided by this list, never by
//! the archive (which may come from anywhere).

use std::path::{Component, Path, PathBuf};

use evi_shared::KeyedId;

use super::BackupError;
use crate::bodies::PackName;
use crate::config::DB_FILE;

/// What an archive entry is, once its name passed [`place`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// A folder: `bodies`, `blobs`, or a user's folder inside one.
    Dir(PathBuf),
    /// The database, a pack or a blob.
    File(PathBuf),
}

/// Where the entry named `name` goes inside the data folder, or why it is
/// refused. A leading `./` is allowed (as `tar -C DIR -cf FILE .` writes).
pub(super) fn place(name: &Path, is_dir: bool) -> Result<Place, BackupError> {
    let refuse = |why| BackupError::Refused {
        entry: name.display().to_string(),
        why,
    };
    let mut parts = Vec::new();
    for c in name.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().ok_or_else(|| refuse("not UTF-8"))?),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse("it climbs out of the folder (..)")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("an absolute path"));
            }
        }
    }
    let user = |s: &str| s.parse::<u64>().is_ok_and(|n| n > 0) && !s.starts_with('0');
    let rel: PathBuf = parts.iter().collect();
    let fits = match (parts.as_slice(), is_dir) {
        ([f], false) => *f == DB_FILE,
        (["bodies" | "blobs"], true) => true,
        (["bodies" | "blobs", u], true) => user(u),
        (["bodies", u, p], false) => user(u) && p.parse::<PackName>().is_ok(),
        (["blobs", u, b], false) => user(u) && b.parse::<KeyedId>().is_ok(),
        _ => false,
    };
    if !fits {
        return Err(refuse(
            "not a name a data folder holds (evi-server.sqlite3, bodies/USER/PACK, blobs/USER/NAME)",
        ));
    }
    Ok(if is_dir {
        Place::Dir(rel)
    } else {
        Place::File(rel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACK: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const BLOB: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn ok(name: &str, dir: bool) -> bool {
        place(Path::new(name), dir).is_ok()
    }

    #[test]
    fn a_data_folder_passes() {
        assert!(ok("evi-server.sqlite3", false));
        assert!(ok("./evi-server.sqlite3", false));
        assert!(ok("bodies/", true));
        assert!(ok("blobs/12", true));
        assert!(ok(&format!("bodies/12/{PACK}"), false));
        assert!(ok(&format!("blobs/12/{BLOB}"), false));
    }

    #[test]
    fn anything_else_is_refused() {
        for (name, dir) in [
            ("../evi-server.sqlite3", false),
            ("/evi-server.sqlite3", false),
            ("bodies/../../etc/passwd", false),
            ("evi-server.sqlite3-wal", false),
            ("evi-server.sqlite3", true),
            ("bodies", false),
            ("bodies/0", true),
            ("bodies/012", true),
            ("bodies/-1", true),
            ("bodies/12/notapack", false),
            (&format!("blobs/12/{PACK}"), false),
            (&format!("bodies/12/{BLOB}"), false),
            (&format!("blobs/12/{BLOB}/x"), false),
            ("etc/passwd", false),
            ("", true),
        ] {
            assert!(!ok(name, dir), "{name:?} passed");
        }
    }
}
