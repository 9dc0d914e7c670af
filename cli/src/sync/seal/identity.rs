//! The user's age X25519 identity: create, load, fingerprint, export and import.
//!
//! # Promises
//!
//! - The identity file is a standard age identity file, byte-compatible with
//!   what `age-keygen` writes, so `age -d -i identity.txt` opens everything
//!   sync stores:
//!
//!   ```text
//!   # created: 2026-06-08T12:34:56Z
//!   # public key: age1…
//!   AGE-SECRET-KEY-1…
//!   ```
//!
//!   Loading accepts any age identity file holding exactly one
//!   `AGE-SECRET-KEY-1…` line (`#` comments and blank lines are ignored).
//! - [`Identity::create`] writes it atomically, mode 0600, and never overwrites
//!   an existing file ([`IdentityError::AlreadyExists`]).
//! - [`Identity::fingerprint`] is for display only: the first 8 bytes of
//!   `SHA-256("evi-fingerprint-v1" 0x00 <recipient as lowercase age1… text>)`,
//!   as 16 lowercase hex digits in four groups joined by `-`
//!   (`3f2a-9c1d-77e0-b4a5`). It reveals neither the secret nor the recipient
//!   (the recipient stays on the device: anyone holding it could encrypt).
//! - [`Identity::export`] wraps the identity file text (the three lines above)
//!   in an ASCII-armored age file encrypted to a passphrase (age's scrypt
//!   recipient), so `age -d` opens it with that passphrase.
//!   [`Identity::import`] reads such a file, armored or binary, with typed
//!   errors for a wrong passphrase, a file that is not age, an age file that
//!   is not passphrase-protected, and a plaintext holding no identity.

use std::fmt;
use std::io::{Read, Write};
use std::iter;
use std::path::{Path, PathBuf};

use age::armor::{ArmoredReader, ArmoredWriter, Format};
use age::secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

const SECRET_PREFIX: &str = "AGE-SECRET-KEY-1";

/// The largest scrypt work factor (`2^N`) a key file to import may ask for:
/// 2^21, 2 GiB of memory and a few seconds. An export asks for what takes
/// about a second on the exporting device (age's default, 2^17 to 2^19 on
/// today's machines). Not age's own bound, 16 times what a single timing of
/// a tiny scrypt run says this device does in a second: that timing is
/// taken as the import starts, and a busy machine that preempts it for a
/// few milliseconds (a build running beside) measured itself slow enough to
/// refuse the key it had exported a moment before.
pub const MAX_IMPORT_WORK_FACTOR: u8 = 21;

/// What can go wrong creating, loading, exporting or importing an identity.
/// None of these is worth retrying unchanged.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "an identity already exists at {0}; refusing to overwrite it (move it away first if you really mean to replace it)"
    )]
    AlreadyExists(PathBuf),
    #[error("no identity at {0}: run `evi sync init` or `evi sync key import FILE`")]
    NotFound(PathBuf),
    #[error("cannot access {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not an age identity file: {0}")]
    Malformed(String),
    #[error("wrong passphrase for this key file")]
    WrongPassphrase,
    #[error("not an exported evi key (expected an age file): {0}")]
    NotAgeFile(String),
    #[error(
        "this age file is not passphrase-protected (expected the output of `evi sync key export` or `age -p`)"
    )]
    NotPassphraseProtected,
    #[error("the key file needs more scrypt work (2^{required}) than this device accepts")]
    ExcessiveWork { required: u8 },
    #[error("the key file decrypted, but holds no age X25519 identity: {0}")]
    NoIdentityInside(String),
    #[error("could not decrypt the key file: {0}")]
    Decrypt(String),
    #[error("could not encrypt the key file: {0}")]
    Encrypt(String),
}

/// One age X25519 identity (secret key) and its recipient (public key).
#[derive(Clone)]
pub struct Identity {
    secret: age::x25519::Identity,
    recipient: age::x25519::Recipient,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A fresh random identity (not written anywhere).
    pub fn generate() -> Self {
        Self::from_age(age::x25519::Identity::generate())
    }

    fn from_age(secret: age::x25519::Identity) -> Self {
        let recipient = secret.to_public();
        Self { secret, recipient }
    }

    /// Parses one `AGE-SECRET-KEY-1…` string.
    pub fn from_secret_str(s: &str) -> Result<Self, IdentityError> {
        let s = s.trim();
        if !s.to_ascii_uppercase().starts_with(SECRET_PREFIX) {
            return Err(IdentityError::Malformed(
                "expected a line starting with AGE-SECRET-KEY-1".into(),
            ));
        }
        s.parse::<age::x25519::Identity>()
            .map(Self::from_age)
            .map_err(|e| IdentityError::Malformed(format!("bad AGE-SECRET-KEY-1 line: {e}")))
    }

    /// Parses the text of an identity file: exactly one `AGE-SECRET-KEY-1`
    /// line; `#` comments and blank lines ignored.
    pub fn parse_file(text: &str) -> Result<Self, IdentityError> {
        let mut found = None;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if found.is_some() {
                return Err(IdentityError::Malformed(
                    "more than one key line; evi expects exactly one X25519 identity".into(),
                ));
            }
            found = Some(Self::from_secret_str(line)?);
        }
        found.ok_or_else(|| IdentityError::Malformed("no AGE-SECRET-KEY-1 line".into()))
    }

    /// Generates an identity and writes it to `path` (see [`Self::save_new`]).
    pub fn create(path: &Path) -> Result<Self, IdentityError> {
        let id = Self::generate();
        id.save_new(path)?;
        Ok(id)
    }

    /// Writes this identity to `path` in age-keygen format, atomically, mode
    /// 0600, creating parent directories; fails if `path` exists.
    pub fn save_new(&self, path: &Path) -> Result<(), IdentityError> {
        let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let text = self.file_text(&created);
        crate::fsutil::write_new_file(path, text.as_bytes()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                IdentityError::AlreadyExists(path.to_owned())
            } else {
                IdentityError::Io {
                    path: path.to_owned(),
                    source: e,
                }
            }
        })
    }

    /// Reads the identity file at `path`.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => Zeroizing::new(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(IdentityError::NotFound(path.to_owned()));
            }
            Err(e) => {
                return Err(IdentityError::Io {
                    path: path.to_owned(),
                    source: e,
                });
            }
        };
        Self::parse_file(&text).map_err(|e| match e {
            IdentityError::Malformed(m) => {
                IdentityError::Malformed(format!("{}: {m}", path.display()))
            }
            other => other,
        })
    }

    /// The `AGE-SECRET-KEY-1…` line alone: what pairing seals for a new
    /// device (see [`crate::sync::seal::pairing`]).
    pub fn secret_line(&self) -> Zeroizing<String> {
        Zeroizing::new(self.secret.to_string().expose_secret().to_owned())
    }

    /// The identity file text as age-keygen writes it.
    pub fn file_text(&self, created_rfc3339: &str) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "# created: {created_rfc3339}\n# public key: {}\n{}\n",
            self.recipient,
            self.secret.to_string().expose_secret()
        ))
    }

    /// The X25519 recipient every sync ciphertext is encrypted to. Keep it on
    /// the device: age does not authenticate senders.
    pub fn recipient(&self) -> &age::x25519::Recipient {
        &self.recipient
    }

    /// The age identity, for decryption.
    pub fn age_identity(&self) -> &age::x25519::Identity {
        &self.secret
    }

    /// A short display fingerprint; see the module docs for its derivation.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"evi-fingerprint-v1\0");
        h.update(self.recipient.to_string().as_bytes());
        let d = h.finalize();
        let hex = hex::encode(&d[..8]);
        format!(
            "{}-{}-{}-{}",
            &hex[0..4],
            &hex[4..8],
            &hex[8..12],
            &hex[12..16]
        )
    }

    /// The raw 32-byte X25519 secret scalar (as encoded in the Bech32 key),
    /// the input keying material of [`crate::sync::seal::keys::SyncKeys`].
    pub(crate) fn secret_bytes(&self) -> Zeroizing<[u8; 32]> {
        let s = self.secret.to_string();
        let decoded = bech32_data(s.expose_secret()).expect("age encodes valid Bech32");
        let mut out = Zeroizing::new([0u8; 32]);
        out.copy_from_slice(&decoded);
        out
    }

    /// The identity file wrapped in an ASCII-armored age file for `passphrase`.
    pub fn export(&self, passphrase: &SecretString) -> Result<Vec<u8>, IdentityError> {
        self.export_with_work_factor(passphrase, None)
    }

    /// As [`Self::export`], with an explicit scrypt work factor `2^log_n`
    /// (`None`: age's default, about one second on this machine). Tests use
    /// small factors.
    pub fn export_with_work_factor(
        &self,
        passphrase: &SecretString,
        log_n: Option<u8>,
    ) -> Result<Vec<u8>, IdentityError> {
        let mut recipient =
            age::scrypt::Recipient::new(SecretString::from(passphrase.expose_secret().to_owned()));
        if let Some(n) = log_n {
            recipient.set_work_factor(n);
        }
        let enc = age::Encryptor::with_recipients(iter::once(&recipient as &dyn age::Recipient))
            .map_err(|e| IdentityError::Encrypt(e.to_string()))?;
        let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let text = self.file_text(&created);
        let run = || -> std::io::Result<Vec<u8>> {
            let armor = ArmoredWriter::wrap_output(Vec::new(), Format::AsciiArmor)?;
            let mut w = enc.wrap_output(armor)?;
            w.write_all(text.as_bytes())?;
            w.finish()?.finish()
        };
        run().map_err(|e| IdentityError::Encrypt(e.to_string()))
    }

    /// Opens a passphrase-protected age file (armored or binary) holding an
    /// identity file, of a work factor up to [`MAX_IMPORT_WORK_FACTOR`].
    pub fn import(bytes: &[u8], passphrase: &SecretString) -> Result<Self, IdentityError> {
        let dec = age::Decryptor::new_buffered(ArmoredReader::new(bytes)).map_err(|e| match e {
            age::DecryptError::Io(io) => IdentityError::NotAgeFile(io.to_string()),
            other => IdentityError::NotAgeFile(other.to_string()),
        })?;
        if !dec.is_scrypt() {
            return Err(IdentityError::NotPassphraseProtected);
        }
        let mut pass =
            age::scrypt::Identity::new(SecretString::from(passphrase.expose_secret().to_owned()));
        pass.set_max_work_factor(MAX_IMPORT_WORK_FACTOR);
        let mut reader = dec
            .decrypt(iter::once(&pass as &dyn age::Identity))
            .map_err(|e| match e {
                age::DecryptError::DecryptionFailed
                | age::DecryptError::KeyDecryptionFailed
                | age::DecryptError::NoMatchingKeys => IdentityError::WrongPassphrase,
                age::DecryptError::ExcessiveWork { required, .. } => {
                    IdentityError::ExcessiveWork { required }
                }
                other => IdentityError::Decrypt(other.to_string()),
            })?;
        // An identity file is tiny; refuse to buffer anything large.
        let mut plain = Zeroizing::new(Vec::new());
        reader
            .by_ref()
            .take(64 * 1024)
            .read_to_end(&mut plain)
            .map_err(|e| IdentityError::Decrypt(e.to_string()))?;
        let text = std::str::from_utf8(&plain)
            .map_err(|_| IdentityError::NoIdentityInside("plaintext is not UTF-8 text".into()))?;
        Self::parse_file(text).map_err(|e| IdentityError::NoIdentityInside(e.to_string()))
    }
}

/// Decodes the data part of a Bech32 string (checksum already verified by
/// age's parser) into bytes.
fn bech32_data(s: &str) -> Option<Vec<u8>> {
    const CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    let lower = Zeroizing::new(s.to_ascii_lowercase());
    let sep = lower.rfind('1')?;
    let data = lower.get(sep + 1..)?.as_bytes();
    let data = data.get(..data.len().checked_sub(6)?)?;
    let mut out = Vec::with_capacity(data.len() * 5 / 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in data {
        let v = CHARSET.iter().position(|&x| x == c)? as u32;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sync::TEST_IDENTITY as TEST_KEY;

    fn pass(s: &str) -> SecretString {
        SecretString::from(s.to_owned())
    }

    #[test]
    fn create_writes_age_keygen_format_0600_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sync").join("identity.txt");
        let id = Identity::create(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("# created: "));
        assert_eq!(lines[1], format!("# public key: {}", id.recipient()));
        assert!(lines[2].starts_with("AGE-SECRET-KEY-1"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let loaded = Identity::load(&path).unwrap();
        assert_eq!(loaded.recipient().to_string(), id.recipient().to_string());
        assert_eq!(loaded.fingerprint(), id.fingerprint());

        let err = Identity::create(&path).unwrap_err();
        assert!(matches!(err, IdentityError::AlreadyExists(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn load_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(
            Identity::load(&missing),
            Err(IdentityError::NotFound(_))
        ));
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "# just a comment\n").unwrap();
        assert!(matches!(
            Identity::load(&bad),
            Err(IdentityError::Malformed(_))
        ));
        std::fs::write(&bad, format!("{TEST_KEY}\n{TEST_KEY}\n")).unwrap();
        assert!(matches!(
            Identity::load(&bad),
            Err(IdentityError::Malformed(_))
        ));
    }

    #[test]
    fn secret_bytes_round_trip_through_bech32() {
        let id = Identity::generate();
        let s = id.age_identity().to_string();
        let bytes = id.secret_bytes();
        let again = bech32_data(s.expose_secret()).unwrap();
        assert_eq!(&again[..], &bytes[..]);
        assert_eq!(again.len(), 32);
    }

    #[test]
    fn fingerprint_is_short_stable_and_not_the_secret() {
        let id = Identity::from_secret_str(TEST_KEY).unwrap();
        let fp = id.fingerprint();
        assert_eq!(fp.len(), 19);
        assert_eq!(
            fp,
            Identity::from_secret_str(TEST_KEY).unwrap().fingerprint()
        );
        assert_ne!(fp, Identity::generate().fingerprint());
        assert!(!TEST_KEY.to_lowercase().contains(&fp.replace('-', "")));
        assert!(format!("{id:?}").contains(&fp));
        assert!(!format!("{id:?}").contains("AGE-SECRET"));
    }

    #[test]
    fn export_import_round_trip() {
        let id = Identity::generate();
        let blob = id
            .export_with_work_factor(&pass("correct horse"), Some(10))
            .unwrap();
        assert!(blob.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
        let back = Identity::import(&blob, &pass("correct horse")).unwrap();
        assert_eq!(back.recipient().to_string(), id.recipient().to_string());

        // The plain age crate opens it with the passphrase, as `age -d` would.
        let dec = age::Decryptor::new_buffered(ArmoredReader::new(&blob[..])).unwrap();
        let p = age::scrypt::Identity::new(pass("correct horse"));
        let mut out = String::new();
        dec.decrypt(iter::once(&p as &dyn age::Identity))
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(out.contains("# public key: age1"));
        assert!(out.contains("AGE-SECRET-KEY-1"));
    }

    /// Where the work factor `10` of a binary age file's scrypt stanza is.
    fn scrypt_log_n_at(file: &[u8]) -> usize {
        let line = file
            .windows(9)
            .position(|w| w == b"-> scrypt")
            .expect("a scrypt stanza");
        let end = line + file[line..].iter().position(|&b| b == b'\n').unwrap();
        assert_eq!(&file[end - 3..end], b" 10", "the work factor exported with");
        end - 2
    }

    #[test]
    fn import_errors_are_typed() {
        let id = Identity::generate();
        let blob = id
            .export_with_work_factor(&pass("right"), Some(10))
            .unwrap();
        assert!(matches!(
            Identity::import(&blob, &pass("wrong")),
            Err(IdentityError::WrongPassphrase)
        ));
        assert!(matches!(
            Identity::import(b"hello, not age at all", &pass("x")),
            Err(IdentityError::NotAgeFile(_))
        ));

        // An age file to a recipient, not a passphrase.
        let other = Identity::generate();
        let enc =
            age::Encryptor::with_recipients(iter::once(other.recipient() as &dyn age::Recipient))
                .unwrap();
        let mut w = enc.wrap_output(Vec::new()).unwrap();
        w.write_all(b"x").unwrap();
        let to_key = w.finish().unwrap();
        assert!(matches!(
            Identity::import(&to_key, &pass("x")),
            Err(IdentityError::NotPassphraseProtected)
        ));

        // A file asking for more scrypt work than any export does is
        // refused before any of it is done, whatever the load (the work
        // factor stands in the header, which the MAC is checked with).
        let blob = id
            .export_with_work_factor(&pass("right"), Some(10))
            .unwrap();
        let mut binary = Vec::new();
        std::io::copy(&mut ArmoredReader::new(&blob[..]), &mut binary).unwrap();
        let at = scrypt_log_n_at(&binary);
        binary[at..at + 2].copy_from_slice(format!("{}", MAX_IMPORT_WORK_FACTOR + 1).as_bytes());
        let started = std::time::Instant::now();
        assert!(matches!(
            Identity::import(&binary, &pass("right")),
            Err(IdentityError::ExcessiveWork { required }) if required == MAX_IMPORT_WORK_FACTOR + 1
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));

        // A passphrase file that holds something else.
        let mut r = age::scrypt::Recipient::new(pass("p"));
        r.set_work_factor(10);
        let enc = age::Encryptor::with_recipients(iter::once(&r as &dyn age::Recipient)).unwrap();
        let mut w = enc.wrap_output(Vec::new()).unwrap();
        w.write_all(b"my shopping list\n").unwrap();
        let not_key = w.finish().unwrap();
        assert!(matches!(
            Identity::import(&not_key, &pass("p")),
            Err(IdentityError::NoIdentityInside(_))
        ));
    }
}
