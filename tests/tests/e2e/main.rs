//! One end-to-end test binary (one link step), a module per area. Every test
//! drives the real `evi` binary against its own throwaway eVi home.

mod common;
mod convergence;
mod deploy;
mod device_names;
mod first_hour_account;
mod first_hour_network;
mod first_hour_sessions;
mod handoff;
mod one_session;
mod server_data;
mod sessions;
mod sync;
mod sync_blobs;
mod sync_conditions;
mod sync_crash;
mod sync_interrupted;
mod sync_journal;
mod sync_kill;
mod sync_proxy;
mod sync_server_view;
mod sync_state;
mod sync_tamper;
mod vectors;
mod watch;
mod web;
mod web_browser;
