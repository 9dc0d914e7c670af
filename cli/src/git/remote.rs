//! Which repository a checkout is a clone of: its `origin` remote, in a
//! form that is the same for every way of writing one URL, so two devices
//! that cloned one repository over SSH and HTTPS agree on it.
//!
//! The form is `host/path`: the host in lower case, without user,
//! password or port; the path without a leading or trailing `/` and
//! without `.git`. It never holds a credential (`https://user:token@…`
//! loses its user part), so it can be recorded and synced.

use std::path::{Path, PathBuf};

use super::Git;

/// `url` as `host/path`; `None` for a remote that names no host (a local
/// path or `file://`: another device's folder says nothing about this one).
pub fn normalize(url: &str) -> Option<String> {
    let url = url.trim();
    let (host, path) = match url.split_once("://") {
        Some((scheme, rest)) => {
            if scheme.eq_ignore_ascii_case("file") {
                return None;
            }
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            (strip_port(host), path)
        }
        // scp-like `[user@]host:path`; a `/` before the `:` makes it a path.
        None => {
            let (authority, path) = url.split_once(':')?;
            if authority.contains('/') {
                return None;
            }
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            (host, path)
        }
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    if host.is_empty() || path.is_empty() {
        return None;
    }
    Some(format!("{}/{path}", host.to_ascii_lowercase()))
}

/// `host:port` without the port (SSH and HTTPS name one repository on
/// different ports); an IPv6 literal keeps its colons.
fn strip_port(host: &str) -> &str {
    if let Some(end) = host.find(']') {
        return &host[..=end];
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// The checkout `dir` is in: its top, and its `origin` remote normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub top: PathBuf,
    pub remote: String,
}

/// The checkout at or above `dir` and its origin, when it has one that
/// names a host. `top` is written as `dir` is (a symlink in `dir` stays),
/// so that it is a prefix of `dir` as the session recorded it.
pub fn origin(dir: &Path) -> Option<Origin> {
    if !dir.is_dir() {
        return None;
    }
    let g = Git::new(dir);
    // `get-url` applies the user's `url.<base>.insteadOf` rewrites.
    let url = g.text(&["remote", "get-url", "origin"]).ok()?;
    let remote = normalize(&url)?;
    let prefix = g.text(&["rev-parse", "--show-prefix"]).ok()?;
    let depth = Path::new(&prefix).components().count();
    let mut top = dir.to_path_buf();
    for _ in 0..depth {
        top = top.parent()?.to_path_buf();
    }
    Some(Origin { top, remote })
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn one_repository_however_written() {
        for url in [
            "git@github.com:pat/app.git",
            "https://github.com/pat/app",
            "https://github.com/pat/app.git/",
            "ssh://git@github.com/pat/app.git",
            "ssh://git@GitHub.com:22/pat/app",
            "https://pat:secret-token@github.com/pat/app.git",
            "git+ssh://git@github.com/pat/app",
            "github.com:pat/app",
        ] {
            assert_eq!(
                normalize(url).as_deref(),
                Some("github.com/pat/app"),
                "{url}"
            );
        }
        assert_eq!(
            normalize("https://gitlab.example.com:8443/group/sub/app.git").as_deref(),
            Some("gitlab.example.com/group/sub/app")
        );
        assert_ne!(
            normalize("git@github.com:pat/app2.git"),
            normalize("git@github.com:pat/app")
        );
        for url in [
            "/srv/git/app.git",
            "file:///srv/git/app",
            "../app",
            "./x:y",
            "",
        ] {
            assert_eq!(normalize(url), None, "{url}");
        }
    }
}
