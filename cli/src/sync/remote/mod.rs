//! What talks to the server: the blocking HTTP client and its retries, the
//! records as they travel (JSON or framed pages), and blobs of any size
//! moved up and down (in parts past the server's blob limit). Nothing here
//! reads the transcripts; what to send and what an answer means for the
//! device is the engine's ([`super::engine`]).
//!
//! - [`client`]: one account's server, its endpoints, the answers'
//!   limits, and which failures are worth retrying.
//! - [`records`]: batches out and pages in, as the server frames them.
//! - [`blob_transfer`]: one blob up or down, verified, in parts when large.

pub mod blob_transfer;
pub mod client;
pub mod records;
