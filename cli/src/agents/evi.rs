//! eVi itself: its sessions are the home's day folders
//! ([`crate::transcript`]), its lines the format every default of
//! [`AgentKind`] describes.

use super::AgentKind;

pub struct Evi;

impl AgentKind for Evi {
    fn title(&self) -> &'static str {
        "eVi"
    }

    fn resume_program(&self) -> &'static [&'static str] {
        &["evi", "sessions", "resume"]
    }

    fn resumes_in_project(&self) -> bool {
        false
    }
}
