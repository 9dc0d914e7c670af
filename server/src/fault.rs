//! A fault-injection hook for crash and race tests, and nothing else.
//!
//! `EVI_SERVER_FAULT=crash-after-body` makes every push that stores bodies
//! abort the process (`std::process::abort`, as abrupt as SIGKILL) right
//! after its bodies are durable and before their rows commit: the one moment
//! a crash leaves an orphan pack. The variable is read once, at start, by the
//! binary; it is deliberately not a flag, so it stays out of `--help`. An
//! unknown value stops the server from starting, so a typo never runs a
//! server that silently ignores it.

/// What to break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Abort between the durable body write and the metadata commit.
    CrashAfterBody,
    /// Abort `migrate` between the devices and the records tables.
    CrashMidMigrate,
    /// Abort a compaction after a forget (see `bodies::compact`) once the
    /// new pack is durable and before the records point at it.
    CrashMidCompaction,
    /// Abort a blob collection (see `blobs::collect`) once the blob's row
    /// is gone and before its bytes are.
    CrashMidCollect,
    /// Pause every pull for [`SLOW_PULL`] between reading where its bodies
    /// are and reading them (saying so in an INFO line first): a
    /// compaction fits in between.
    SlowPullBodies,
}

/// How long `slow-pull-bodies` pauses a pull.
pub const SLOW_PULL: std::time::Duration = std::time::Duration::from_secs(3);

/// The variable that sets the fault.
pub const FAULT_ENV: &str = "EVI_SERVER_FAULT";

#[derive(Debug, thiserror::Error)]
#[error(
    "{FAULT_ENV}={0:?} is not a known fault (known: crash-after-body, crash-mid-migrate, crash-mid-compaction, crash-mid-collect, slow-pull-bodies)"
)]
pub struct UnknownFault(String);

impl Fault {
    /// The fault `EVI_SERVER_FAULT` asks for (unset or empty: none).
    pub fn from_env() -> Result<Option<Self>, UnknownFault> {
        match std::env::var(FAULT_ENV).unwrap_or_default().as_str() {
            "" => Ok(None),
            "crash-after-body" => Ok(Some(Self::CrashAfterBody)),
            "crash-mid-migrate" => Ok(Some(Self::CrashMidMigrate)),
            "crash-mid-compaction" => Ok(Some(Self::CrashMidCompaction)),
            "crash-mid-collect" => Ok(Some(Self::CrashMidCollect)),
            "slow-pull-bodies" => Ok(Some(Self::SlowPullBodies)),
            other => Err(UnknownFault(other.to_owned())),
        }
    }
}
