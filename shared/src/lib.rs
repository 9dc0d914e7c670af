//! What the `evi` client and `evi-server` must agree on, in one place: the
//! formats of ids that cross the wire or name files, the limits both sides
//! enforce, (in [`api`]) the request and response types of the HTTP API, and
//! (in [`frames`]) the binary body that carries ciphertext in bulk.
//!
//! Nothing here does I/O of its own (frames read from any `Read`); both sides parse untrusted strings through these
//! types before using them, so a malformed id is rejected at the edge.

pub mod api;
pub mod blob_refs;
pub mod forget;
pub mod frames;
pub mod ids;
pub mod limits;
pub mod span;

pub use ids::{Day, IdError, KeyedId, SessionId};
