//! Argument parsing and dispatch.
use std::process::ExitCode;

pub fn main() -> ExitCode {
    ExitCode::SUCCESS
}
