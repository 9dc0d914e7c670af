//! The fault and clock hooks the crash tests drive the real `evi` binary
//! with, in one place, compiled only with the `test-hooks` feature.
//!
//! Only the test crate turns the feature on (a dev-dependency in
//! `tests/Cargo.toml`), so `cargo build --release` makes an `evi` that reads
//! none of these variables: nothing a user's environment happens to carry
//! can abort a rotation, cut a pull short or move the trash's clock. Without
//! the feature each hook is a constant the compiler folds away; with it:
//!
//! - `EVI_ROTATE_KILL_AT=<point>[:<n>]` aborts a key rotation at `point`
//!   (`page`, `verify`, `commit`, `swap`), the n-th time it is reached;
//! - `EVI_PULL_CUT_AT=<n>` aborts inside the n-th pull append that crosses a
//!   page boundary, once its first page is written (`sync::state::append_marks`);
//! - `EVI_TEST_NOW_OFFSET_SECS=<s>` moves the clock the trash reads by `s`
//!   seconds, so a test pulls "a day later" without waiting.

/// Aborts the process (as a kill would) when `EVI_ROTATE_KILL_AT` names
/// `point` and this is the n-th time it is reached; `count` counts them.
#[cfg(feature = "test-hooks")]
pub fn rotate_kill_point(point: &str, count: &mut u64) {
    let Ok(want) = std::env::var("EVI_ROTATE_KILL_AT") else {
        return;
    };
    let (name, nth) = match want.split_once(':') {
        Some((n, k)) => (n.to_owned(), k.parse().unwrap_or(1)),
        None => (want, 1),
    };
    if name == point {
        *count += 1;
        if *count >= nth {
            std::process::abort();
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn rotate_kill_point(_point: &str, _count: &mut u64) {}

/// Which page-crossing pull append `EVI_PULL_CUT_AT` asks to cut (1 for the
/// first), read once.
#[cfg(feature = "test-hooks")]
pub fn pull_cut_at() -> Option<u64> {
    static AT: std::sync::LazyLock<Option<u64>> = std::sync::LazyLock::new(|| {
        std::env::var("EVI_PULL_CUT_AT")
            .ok()
            .and_then(|n| n.parse().ok())
    });
    *AT
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn pull_cut_at() -> Option<u64> {
    None
}

/// Seconds `EVI_TEST_NOW_OFFSET_SECS` adds to the trash's clock (negative
/// for earlier); 0 when unset or not a whole number.
#[cfg(feature = "test-hooks")]
pub fn now_offset_secs() -> i64 {
    std::env::var("EVI_TEST_NOW_OFFSET_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn now_offset_secs() -> i64 {
    0
}
