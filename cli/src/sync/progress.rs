//! Progress the engine reports and the command line draws: a bar on a
//! terminal (indicatif hides itself when stderr is not one), nothing in pipes.

use indicatif::{ProgressBar, ProgressStyle};

pub trait Progress {
    fn start(&self, what: &str, total: u64);
    fn inc(&self, n: u64);
    fn finish(&self);
}

/// Draws nothing (tests, `--json`).
pub struct Quiet;

impl Progress for Quiet {
    fn start(&self, _: &str, _: u64) {}
    fn inc(&self, _: u64) {}
    fn finish(&self) {}
}

/// An indicatif bar on stderr.
pub struct Bar(ProgressBar);

impl Default for Bar {
    fn default() -> Self {
        Self(ProgressBar::hidden())
    }
}

impl Progress for Bar {
    fn start(&self, what: &str, total: u64) {
        self.0
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        self.0.set_length(total);
        self.0.set_position(0);
        self.0.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.0.set_message(what.to_owned());
    }
    fn inc(&self, n: u64) {
        self.0.inc(n);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
