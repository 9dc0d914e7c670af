//! The `evi` binary's contract with scripts and people, from outside: exit
//! codes and where output goes, completions and man pages, the help, and the
//! progress bar. One test binary, not one per file: each of them was a link
//! of its own after every change to the crate. (Behaviour is tested end to
//! end in the workspace's `tests/` crate.)

mod completions;
mod exit_codes;
mod help;
mod progress;
