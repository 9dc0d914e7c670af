//! The engine behind the `evi` command: the eVi home on disk, the transcript
//! reader and session tree, eVi's checkpoints, and the commands built on
//! them. `main.rs` only calls [`cli::main`].

pub mod agents;
pub mod checkpoints;
pub mod cli;
pub mod command_error;
pub mod commands;
pub mod config;
pub mod deeplink;
pub mod desktop;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod git;
pub mod home;
pub mod malloc;
pub mod message;
pub mod resume;
pub mod search;
pub mod source;
pub mod sync;
pub mod test_hooks;
pub mod title_command;
pub mod transcript;
pub mod web;
