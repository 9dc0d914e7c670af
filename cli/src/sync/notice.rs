//! What the engine says while it waits (a rate limit, a lost connection, a
//! held lock): one line for a person, never data. The command line names the
//! sink once; with none set the engine says nothing (as a library, in unit
//! tests).

use std::sync::OnceLock;

static SINK: OnceLock<fn(&str)> = OnceLock::new();

/// Where notices go for the rest of the process (the first call wins).
pub fn set_sink(sink: fn(&str)) {
    let _ = SINK.set(sink);
}

/// Tells the user, if a sink is set.
pub fn notice(msg: &str) {
    if let Some(sink) = SINK.get() {
        sink(msg);
    }
}
