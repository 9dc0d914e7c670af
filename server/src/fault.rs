//! A fault-injection hook for crash and race tests, and nothing else: only a
//! build with the `test-hooks` feature (the tests') reads it; the server
//! `cargo build` makes never does, and every [`is`] is false there.
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
    /// Hold `evi-server backup` after its first snapshot until a line
    /// arrives on its stdin (saying so on stderr first): a test deletes a
    /// file the snapshot names meanwhile.
    HoldBackupAfterSnapshot,
}

/// How long `slow-pull-bodies` pauses a pull.
pub const SLOW_PULL: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether the fault `set` is `want`. Always false in a build without the
/// `test-hooks` feature, so every branch that breaks something on purpose is
/// compiled out of the server operators run.
#[inline(always)]
pub fn is(set: Option<Fault>, want: Fault) -> bool {
    cfg!(feature = "test-hooks") && set == Some(want)
}

/// Aborts the process (as abruptly as SIGKILL) when `armed`, logging
/// `fault <what>` first. Inlined, so without the `test-hooks` feature the
/// call, its message and its abort are gone from the binary.
#[inline(always)]
pub fn crash_if(armed: bool, what: &str) {
    if cfg!(feature = "test-hooks") && armed {
        tracing::error!("fault {what}");
        std::process::abort();
    }
}

#[cfg(feature = "test-hooks")]
pub use from_env::{FAULT_ENV, UnknownFault, from_env};

#[cfg(feature = "test-hooks")]
mod from_env {
    use super::Fault;

    /// The variable that sets the fault.
    pub const FAULT_ENV: &str = "EVI_SERVER_FAULT";

    #[derive(Debug, thiserror::Error)]
    #[error(
        "{FAULT_ENV}={0:?} is not a known fault (known: crash-after-body, crash-mid-migrate, crash-mid-compaction, crash-mid-collect, slow-pull-bodies, hold-backup-after-snapshot)"
    )]
    pub struct UnknownFault(String);

    /// The fault `EVI_SERVER_FAULT` asks for (unset or empty: none).
    pub fn from_env() -> Result<Option<Fault>, UnknownFault> {
        match std::env::var(FAULT_ENV).unwrap_or_default().as_str() {
            "" => Ok(None),
            "crash-after-body" => Ok(Some(Fault::CrashAfterBody)),
            "crash-mid-migrate" => Ok(Some(Fault::CrashMidMigrate)),
            "crash-mid-compaction" => Ok(Some(Fault::CrashMidCompaction)),
            "crash-mid-collect" => Ok(Some(Fault::CrashMidCollect)),
            "slow-pull-bodies" => Ok(Some(Fault::SlowPullBodies)),
            "hold-backup-after-snapshot" => Ok(Some(Fault::HoldBackupAfterSnapshot)),
            other => Err(UnknownFault(other.to_owned())),
        }
    }
}
