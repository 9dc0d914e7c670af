//! What seals and opens: the user's age identity, the keys derived from
//! it, and the sealed formats that leave the device. Nothing here talks to
//! the server or reads the device's sync state; everything is synchronous
//! (callers run it on blocking threads).
//!
//! - [`identity`]: the age X25519 identity file, its fingerprint, and its
//!   passphrase-protected export/import.
//! - [`keys`]: HKDF-derived keys, the keyed ids the server sees, and the key
//!   check value.
//! - [`segment`]: many entries (or journal lines) of one stream in one age
//!   file, compressed, MAC'd and bound to their outer ids.
//! - [`blob`]: checkpoint blobs as streamed age files, verified by SHA-256.
//! - [`frame`]: the sealed, MAC-bound frame of small records that are not
//!   segments (tombstones).
//! - [`zstd_context`]: one compression context per sealing thread.
//! - [`pairing`]: the short code, the PAKE and the sealed messages that
//!   move the identity to a new device through the server as a blind relay.
//!
//! `sync/testdata/vectors.json` freezes every deterministic byte (keyed ids,
//! KCV, segment plaintext and MAC) for a fixed test identity ([`vectors`]).

pub mod blob;
pub mod frame;
pub mod identity;
pub mod keys;
pub mod pairing;
pub mod segment;
pub mod zstd_context;

#[cfg(test)]
mod vectors;
