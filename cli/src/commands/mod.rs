//! One module per command group, one file per subcommand.

pub mod checkpoints;
pub mod completions;
pub mod link;
pub mod rewind;
pub mod sessions;
pub mod shared;
pub mod sync;
pub mod web;

use crate::command_error::CommandError;
use crate::config::Config;
use crate::home::EviHome;
use shared::warn;

/// What every command starts from: the home and its config.
pub struct Ctx {
    pub home: EviHome,
    pub config: Config,
}

impl Ctx {
    /// Finds the home and reads its config, printing config warnings.
    pub fn load() -> Result<Self, CommandError> {
        let home = EviHome::from_env().map_err(|e| {
            let hint = e.hint();
            crate::command_error::user_error(e).hinted(hint)
        })?;
        let loaded = Config::load(&home.config_file()).map_err(|e| {
            let hint = e.hint();
            crate::command_error::user_error(e).hinted(hint)
        })?;
        for w in &loaded.warnings {
            warn(w);
        }
        Ok(Self {
            home,
            config: loaded.config,
        })
    }
}
