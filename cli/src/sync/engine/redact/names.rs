//! Files that are secrets by their name, whatever they hold: what a handoff
//! leaves on the device even when no rule finds a secret in it (a `.env`
//! line `SECRET=hunter2` is in no known format). Matched on the last part
//! of the path, in any ASCII case.
//!
//! - names: `.env`, `.netrc`, `_netrc`, `.pgpass`, `.htpasswd`,
//!   `.git-credentials`, `.npmrc`, `.pypirc`, `credentials` (as in
//!   `~/.aws/credentials`), and the SSH keys `id_rsa`, `id_dsa`, `id_ecdsa`,
//!   `id_ed25519`, `id_ecdsa_sk`, `id_ed25519_sk`;
//! - `.env.<anything>` and `<anything>.env`, but not the templates meant to
//!   be shared: `.env.example`, `.env.sample`, `.env.template`, `.env.dist`;
//! - extensions of key and certificate stores: `.pem`, `.key`, `.p12`,
//!   `.pfx`, `.jks`, `.keystore`, `.kdbx`, `.ppk`.

/// Names that are secrets as they are.
const NAMES: &[&str] = &[
    ".env",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".htpasswd",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "credentials",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
];

/// Extensions of files that hold keys.
const EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx", "jks", "keystore", "kdbx", "ppk"];

/// `.env.<this>`: a template, shared on purpose.
const TEMPLATES: &[&str] = &["example", "sample", "template", "dist"];

/// Whether the file at `path` (`/`-separated) is a secret by its name.
pub fn secret_by_name(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    if NAMES.contains(&name.as_str()) {
        return true;
    }
    if let Some(rest) = name.strip_prefix(".env.") {
        return !TEMPLATES.contains(&rest);
    }
    if name.len() > ".env".len() && name.ends_with(".env") {
        return true;
    }
    name.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext))
}

#[cfg(test)]
mod tests {
    use super::secret_by_name;

    #[test]
    fn secrets_by_name_and_their_neighbours_that_are_not() {
        for yes in [
            ".env",
            "app/.env",
            ".env.local",
            ".ENV.production",
            "docker.env",
            "deploy/server.pem",
            "tls.KEY",
            "keys/id_ed25519",
            "id_rsa",
            ".aws/credentials",
            "store.p12",
            ".npmrc",
        ] {
            assert!(secret_by_name(yes), "{yes}");
        }
        for no in [
            ".env.example",
            "app/.env.sample",
            ".env.template",
            "environment.rs",
            "id_rsa.pub",
            "keys/README.md",
            "src/key.rs",
            ".pem",
            "monkey",
            "credentials.md",
            "env",
        ] {
            assert!(!secret_by_name(no), "{no}");
        }
    }
}
