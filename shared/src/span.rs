//! Spans of time as people type them on either side (`180d`, `12w`, `48h`,
//! `30m`): `evi sessions forget --older-than`, `evi-server invite
//! --expires`. One grammar, so a span that works in one command works in
//! every other.

use std::time::Duration;

/// What a span may be written as, for error messages.
pub const SPAN_EXAMPLES: &str = "180d, 12w, 48h or 30m";

/// A number and one unit (`m`, `h`, `d`, `w`); `None` for anything else.
/// Large numbers saturate rather than wrap.
pub fn parse_span(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let secs = match unit {
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(n.saturating_mul(secs)))
}

#[cfg(test)]
mod tests {
    use super::parse_span;

    #[test]
    fn spans_read_with_their_unit() {
        assert_eq!(parse_span("180d").unwrap().as_secs(), 180 * 86_400);
        assert_eq!(parse_span("2w").unwrap().as_secs(), 14 * 86_400);
        assert_eq!(parse_span("48h").unwrap().as_secs(), 48 * 3600);
        assert_eq!(parse_span("30m").unwrap().as_secs(), 30 * 60);
        assert!(parse_span("180").is_none());
        assert!(parse_span("d").is_none());
        assert!(parse_span("5y").is_none());
        assert!(parse_span("-5d").is_none());
        assert!(parse_span("").is_none());
    }
}
