//! Where a project of another device is on this one (`[paths]` in
//! config.toml): a prefix map, exact strings, longest prefix first, a
//! prefix matching whole path components only; then the git remote (see
//! [`super::project`] and [`super::checkouts`]); else the original path.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `[paths]` prefix map.
#[derive(Debug, Clone, Default)]
pub struct PathMap {
    /// (from, to), longest `from` first.
    prefixes: Vec<(String, String)>,
    /// (to, from), longest `to` first: the way back.
    inverse: Vec<(String, String)>,
}

impl PathMap {
    pub fn new(map: &BTreeMap<String, String>) -> Self {
        let mut prefixes: Vec<(String, String)> = map
            .iter()
            .map(|(k, v)| (trim(k).to_owned(), trim(v).to_owned()))
            .collect();
        let by_len = |a: &(String, String), b: &(String, String)| {
            b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0))
        };
        prefixes.sort_by(by_len);
        let mut inverse: Vec<(String, String)> = prefixes
            .iter()
            .map(|(f, t)| (t.clone(), f.clone()))
            .collect();
        inverse.sort_by(by_len);
        Self { prefixes, inverse }
    }

    /// This map and one more pair (a project placed by its git remote,
    /// [`super::project`]), kept in longest-first order.
    pub fn with(&self, from: &str, to: &str) -> Self {
        let mut map: BTreeMap<String, String> = self.prefixes.iter().cloned().collect();
        map.insert(from.to_owned(), to.to_owned());
        Self::new(&map)
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// `path` as it is on this device.
    pub fn local(&self, path: &str) -> String {
        map_by(&self.prefixes, path)
    }

    /// A path of this device as the map's other side writes it: the way
    /// back of [`Self::local`].
    pub fn original(&self, path: &str) -> String {
        map_by(&self.inverse, path)
    }
}

fn map_by(prefixes: &[(String, String)], path: &str) -> String {
    {
        for (from, to) in prefixes {
            if let Some(rest) = path.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with('/') || from == "/")
            {
                return format!("{to}{rest}");
            }
        }
        path.to_owned()
    }
}

/// A prefix without a trailing `/` (but `/` itself stays).
fn trim(s: &str) -> &str {
    match s.trim_end_matches('/') {
        "" if s.starts_with('/') => "/",
        t => t,
    }
}

/// `~` or `~/…` at the start of `dir` as `$HOME`.
pub fn expand_home(dir: &str) -> PathBuf {
    match (dir.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(format!("{}{rest}", home.to_string_lossy()))
        }
        _ => PathBuf::from(dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_whole_prefix_wins() {
        let mut m = BTreeMap::new();
        m.insert("/home/a".to_owned(), "/srv/x".to_owned());
        m.insert("/home/a/proj/".to_owned(), "/srv/b/proj".to_owned());
        let m = PathMap::new(&m);
        assert_eq!(m.local("/home/a/proj/sub"), "/srv/b/proj/sub");
        assert_eq!(m.local("/home/a/proj"), "/srv/b/proj");
        assert_eq!(m.local("/home/a/other"), "/srv/x/other");
        assert_eq!(m.local("/home/ab"), "/home/ab");
        assert_eq!(m.local("/elsewhere"), "/elsewhere");
        assert_eq!(m.original("/srv/b/proj/sub"), "/home/a/proj/sub");
        assert_eq!(m.original("/srv/x/other"), "/home/a/other");
    }
}
