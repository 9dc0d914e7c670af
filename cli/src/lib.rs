//! The engine behind the `evi` command: the eVi home on disk, the transcript
//! reader and session tree, and the commands built on them. `main.rs` only
//! calls [`cli::main`].

pub mod cli;
pub mod command_error;
pub mod commands;
pub mod config;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod home;
pub mod malloc;
pub mod message;
pub mod resume;
pub mod sync;
pub mod transcript;
pub mod web;
