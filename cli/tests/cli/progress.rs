//! The progress bar as a terminal would show it: labelled from the first
//! frame, with the unit of what it counts, and a rate only once it settled.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evi::sync::progress::{Bar, Progress, Unit, rate_text};
use indicatif::{ProgressDrawTarget, TermLike};

/// A terminal that keeps every line drawn on it.
#[derive(Debug, Clone, Default)]
struct Screen(Arc<Mutex<Vec<String>>>);

impl Screen {
    fn frames(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|f| !f.trim().is_empty())
            .cloned()
            .collect()
    }
}

impl TermLike for Screen {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.write_str(s)
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.0.lock().unwrap().push(s.to_owned());
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

fn bar_on(screen: &Screen) -> Bar {
    let screen = screen.clone();
    Bar::to(move || ProgressDrawTarget::term_like(Box::new(screen.clone())))
}

#[test]
fn first_frame_is_labelled_and_counts_sessions() {
    let screen = Screen::default();
    let bar = bar_on(&screen);
    bar.start("pushing", 40);
    let frames = screen.frames();
    assert_eq!(
        frames.first().map(String::as_str),
        Some("pushing [                              ] 0/40 sessions"),
        "{frames:?}"
    );
    bar.finish();
}

#[test]
fn pull_counts_records() {
    let screen = Screen::default();
    let bar = bar_on(&screen);
    bar.start("pulling", 12);
    bar.inc(12);
    bar.finish();
    let frames = screen.frames();
    assert_eq!(
        frames.first().map(String::as_str),
        Some("pulling [                              ] 0/12 records"),
        "{frames:?}"
    );
    assert!(
        frames.iter().all(|f| f.starts_with("pulling [")),
        "every frame is labelled: {frames:?}"
    );
}

#[test]
fn units_follow_the_engine_labels() {
    assert_eq!(Unit::of("pushing"), Unit::Sessions);
    assert_eq!(Unit::of("pulling"), Unit::Records);
    assert_eq!(Unit::of("uploading blobs"), Unit::Bytes);
    assert_eq!(Unit::of("checking"), Unit::Items);
}

#[test]
fn rate_waits_until_it_settled_then_stays_in_whole_seconds() {
    let eta = Duration::from_millis(9_400);
    // Nothing done yet, or too early to tell: no rate, no time left.
    assert_eq!(
        rate_text(Unit::Sessions, 0, Duration::from_secs(5), 0.0, eta),
        ""
    );
    assert_eq!(
        rate_text(Unit::Sessions, 3, Duration::from_millis(400), 7.5, eta),
        ""
    );
    assert_eq!(
        rate_text(Unit::Sessions, 12, Duration::from_secs(4), 3.24, eta),
        ", 3.2/s, 9 seconds left"
    );
    assert_eq!(
        rate_text(Unit::Records, 900, Duration::from_secs(4), 230.6, eta),
        ", 231/s, 9 seconds left"
    );
    assert_eq!(
        rate_text(
            Unit::Bytes,
            9_000_000,
            Duration::from_secs(3),
            2_500_000.0,
            eta
        ),
        ", 2.50 MB/s, 9 seconds left"
    );
}
