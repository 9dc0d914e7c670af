//! Times as commands print them: local for people, RFC 3339 for JSON.

use chrono::{Local, TimeZone};

/// An epoch-millisecond time in local time, as `pattern` (strftime).
fn fmt_local(ms: i64, pattern: &str) -> String {
    Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format(pattern).to_string())
        .unwrap_or_else(|| "?".into())
}

/// Local date and minute.
pub fn fmt_minute(ms: i64) -> String {
    fmt_local(ms, "%Y-%m-%d %H:%M")
}

/// Local date and second.
pub fn fmt_second(ms: i64) -> String {
    fmt_local(ms, "%Y-%m-%d %H:%M:%S")
}

/// RFC 3339 in UTC, for JSON output.
pub fn fmt_rfc3339(ms: i64) -> Option<String> {
    crate::transcript::summary::rfc3339(ms)
}
