//! The terminal's spinner: a line that turns while the model thinks or a
//! retry waits (counting down the wait), cleared when it ends.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

use super::WaitUntil;

/// A spinner whose last frame is cleared when it is dropped, with the time
/// left of a retry wait counting down after its message.
pub(super) fn new_spinner(wait_until: &WaitUntil) -> ProgressBar {
    let wait = wait_until.clone();
    let style = ProgressStyle::with_template("{spinner} {msg}{wait}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key(
            "wait",
            move |_: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let until = *wait.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(left) = until.and_then(|u| u.checked_duration_since(Instant::now())) {
                    let _ = write!(w, " in {:.1}s", left.as_secs_f64());
                }
            },
        );
    let bar = ProgressBar::new_spinner().with_finish(ProgressFinish::AndClear);
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Clears the spinner's line on a terminal, for an exit that skips the
/// sink's own cleanup (a second Ctrl-C).
pub(crate) fn clear_terminal_line() {
    if io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
        let _ = io::stderr().flush();
    }
}
