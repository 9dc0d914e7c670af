//! Errors of sync operations. Which ones are worth retrying: a transient
//! [`ClientError`] (network, 5xx, 429) and a busy lock; every other one needs
//! the user to act (the message says how) or means a server sent something
//! that must not be trusted.

use crate::sync::remote::client::ClientError;
use crate::sync::state::lock::LockError;
use crate::sync::{BlobError, IdentityError, SegmentError};

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// `note` is empty, or says why after a colon (no folder at `home`).
    #[error("the eVi home {} is not set up for sync{note}", .home.display())]
    NotSetUp {
        home: std::path::PathBuf,
        note: String,
    },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("record {seq} from the server was refused: {source}")]
    Segment {
        seq: u64,
        #[source]
        source: SegmentError,
    },
    #[error("blob {name} from the server was refused: {source}")]
    Blob {
        name: String,
        #[source]
        source: BlobError,
    },
    #[error(
        "a line is too large for this server: its segment (stream {stream}) is {size} bytes, \
         over the server's {max}-byte batch limit"
    )]
    TooLarge { stream: String, size: u64, max: u64 },
    #[error(
        "this device's key does not match the account's: it was not made from the same identity"
    )]
    KeyMismatch,
    /// config.toml asks for something that does not exist.
    #[error("{0}")]
    Config(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Adds what was being done to an I/O error.
pub trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, SyncError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, SyncError> {
        self.map_err(|source| SyncError::Io {
            context: context(),
            source,
        })
    }
}
