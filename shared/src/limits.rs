//! Limits both sides enforce. The server advertises its own values through the
//! capabilities call; these are the defaults and the hard format bounds.

/// Longest session id accepted anywhere (it names a file on the device).
pub const SESSION_ID_MAX_LEN: usize = 128;

/// Length in hex characters of a keyed id (HMAC-SHA256 output).
pub const KEYED_ID_HEX_LEN: usize = 64;
