//! eVi's deep links: `evi://session/<full session id>` opens a session in
//! eVi on a desktop that has the scheme registered (`evi link` prints one).

use evi_shared::SessionId;

/// The scheme and kind of a session link.
pub const SESSION_LINK_PREFIX: &str = "evi://session/";

/// The deep link that opens session `id`.
pub fn session_link(id: &SessionId) -> String {
    format!("{SESSION_LINK_PREFIX}{id}")
}
