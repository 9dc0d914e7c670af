//! Progress the engine reports and the command line draws: a bar on a
//! terminal (indicatif hides itself when stderr is not one), nothing in pipes.
//!
//! The engine only calls [`Progress`]; what a bar counts follows from its
//! label ([`Unit::of`]), so the engine names no unit and draws nothing. It
//! also tells of what did not move (a blob not sent, not found) through
//! [`Progress::warn`], so the reporter the face hands in says it: the two
//! here print `warning: ...` on stderr, with a bar or without one.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{
    DecimalBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle,
};

pub trait Progress {
    fn start(&self, what: &str, total: u64);
    fn inc(&self, n: u64);
    fn finish(&self);
    /// Something the user should know that did not stop the work (a blob
    /// that did not move): one line for a person.
    fn warn(&self, msg: &str);
}

/// A warning as the command line prints it, whatever draws the progress.
fn print_warning(msg: &str) {
    eprintln!("warning: {msg}");
}

/// Draws nothing (tests, `--json`), and still prints warnings: they are
/// not progress.
pub struct Quiet;

impl Progress for Quiet {
    fn start(&self, _: &str, _: u64) {}
    fn inc(&self, _: u64) {}
    fn finish(&self) {}
    fn warn(&self, msg: &str) {
        print_warning(msg);
    }
}

/// What a bar counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `evi sync push` goes through the sessions.
    Sessions,
    /// `evi sync pull` goes through the server's records.
    Records,
    /// Blob transfers, drawn in MB.
    Bytes,
    /// Anything else: a bare count.
    Items,
}

impl Unit {
    /// The unit of one of the engine's labels: `pushing` counts sessions,
    /// `pulling` records, a label naming bytes or blobs counts bytes.
    pub fn of(label: &str) -> Self {
        match label {
            "pushing" => Self::Sessions,
            "pulling" => Self::Records,
            l if l.contains("bytes") || l.contains("blob") => Self::Bytes,
            _ => Self::Items,
        }
    }

    /// `n` of this unit as a bar shows it.
    fn amount(self, n: u64) -> String {
        match self {
            Self::Bytes => DecimalBytes(n).to_string(),
            _ => n.to_string(),
        }
    }

    /// The word after a count, empty for bytes (the amount says MB).
    fn word(self) -> &'static str {
        match self {
            Self::Sessions => " sessions",
            Self::Records => " records",
            Self::Bytes | Self::Items => "",
        }
    }
}

/// How often the bar redraws by itself, so the rate and time left move
/// smoothly between the engine's steps instead of jumping on each.
const TICK: Duration = Duration::from_millis(200);

/// How long the rate is left out: the first steps say little about it.
const SETTLE: Duration = Duration::from_secs(1);

/// The bar's template. `{count}` and `{rate}` are [`style`]'s own keys.
pub const TEMPLATE: &str = "{prefix} [{bar:30}] {count}{rate}";

/// The style of a bar counting `unit`: `pushing [====>   ] 12/40 sessions,
/// 3.2/s, 9s left` (the rate and time left once they have settled).
pub fn style(unit: Unit) -> ProgressStyle {
    let count = move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let len = s.len().map_or_else(|| "?".into(), |l| unit.amount(l));
        let _ = write!(w, "{}/{len}{}", unit.amount(s.pos()), unit.word());
    };
    let rate = move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = w.write_str(&rate_text(unit, s.pos(), s.elapsed(), s.per_sec(), s.eta()));
    };
    ProgressStyle::with_template(TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        .with_key("count", count)
        .with_key("rate", rate)
}

/// The `, RATE/s, T left` part: empty until a step was made and [`SETTLE`]
/// passed; the time left is whole seconds (indicatif's estimate is smoothed).
pub fn rate_text(unit: Unit, pos: u64, elapsed: Duration, per_sec: f64, eta: Duration) -> String {
    if pos == 0 || elapsed < SETTLE || !per_sec.is_finite() || per_sec <= 0.0 {
        return String::new();
    }
    let rate = match unit {
        Unit::Bytes => format!("{}/s", DecimalBytes(per_sec as u64)),
        _ if per_sec < 10.0 => format!("{per_sec:.1}/s"),
        _ => format!("{per_sec:.0}/s"),
    };
    let left = Duration::from_secs(eta.as_secs_f64().round() as u64);
    format!(", {rate}, {} left", HumanDuration(left))
}

/// An indicatif bar, on stderr unless told otherwise.
pub struct Bar {
    target: Box<dyn Fn() -> ProgressDrawTarget + Send + Sync>,
    bar: Mutex<Option<ProgressBar>>,
}

impl Default for Bar {
    fn default() -> Self {
        Self::to(ProgressDrawTarget::stderr)
    }
}

impl Bar {
    /// A bar that draws each run to a target `target` makes (tests draw to
    /// a [`indicatif::TermLike`]).
    pub fn to(target: impl Fn() -> ProgressDrawTarget + Send + Sync + 'static) -> Self {
        Self {
            target: Box::new(target),
            bar: Mutex::new(None),
        }
    }

    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            f(bar);
        }
    }
}

impl Progress for Bar {
    fn start(&self, what: &str, total: u64) {
        // Set up while hidden, so the first frame drawn is the finished one.
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
            .with_style(style(Unit::of(what)))
            .with_prefix(what.to_owned());
        bar.set_draw_target((self.target)());
        bar.force_draw();
        bar.enable_steady_tick(TICK);
        let old = self
            .bar
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(bar);
        if let Some(old) = old {
            old.finish_and_clear();
        }
    }
    fn inc(&self, n: u64) {
        self.with_bar(|b| b.inc(n));
    }
    fn finish(&self) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
    fn warn(&self, msg: &str) {
        print_warning(msg);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish();
    }
}
