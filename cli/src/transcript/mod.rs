//! Reading eVi transcripts: which files exist ([`catalog`]), their lines
//! streamed with bounded memory ([`lines`]), each line's head ([`line`]), entry
//! ids ([`entry_id`]), the session tree they form ([`tree`]), and the
//! titles kept beside it ([`title`]). Other agents' sessions form the same
//! tree, each line read once for what it keeps ([`agent_line`]).

pub mod agent_line;
pub mod catalog;
pub mod entry_id;
pub mod git_state;
pub mod line;
pub mod lines;
pub mod recent;
pub mod summary;
pub mod title;
pub mod tree;
pub mod view;

pub use catalog::{Catalog, SessionFile};
pub use tree::SessionTree;
