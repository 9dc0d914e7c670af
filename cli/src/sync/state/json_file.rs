//! A small JSON file of the sync folder that a device keeps between runs
//! (`forget.json`, `checkpoint-forget.json`): read whole, or its default
//! when there is none yet; replaced atomically (temp file, fsync, rename),
//! like `state.json`, so a kill leaves the old or the new one, never a
//! torn one.

use std::io;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The file at `path`, or `T::default()` when there is none. A file that
/// does not parse is an error naming it, never read as empty: that would
/// lose what it holds at the next save.
pub fn load<T: DeserializeOwned + Default>(path: &Path) -> io::Result<T> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is damaged ({e})", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(e),
    }
}

/// Replaces the file at `path` with `value`, atomically.
pub fn save<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    crate::fsutil::replace_file(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Doc {
        n: u32,
    }

    #[test]
    fn absent_is_default_damaged_is_an_error_and_a_save_reads_back() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("doc.json");
        assert_eq!(load::<Doc>(&p).unwrap(), Doc::default());
        save(&p, &Doc { n: 3 }).unwrap();
        assert_eq!(load::<Doc>(&p).unwrap(), Doc { n: 3 });
        std::fs::write(&p, b"{not json").unwrap();
        let e = load::<Doc>(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("doc.json is damaged"), "{e}");
    }
}
