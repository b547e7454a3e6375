//! The terminal's spinner: a line that turns while the model thinks or a
//! retry waits (counting down the wait), cleared when it ends, and never
//! as wide as the terminal (so a Ctrl-C's `^C` cannot wrap it).

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use console::Term;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle, TermLike};

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
    let target =
        ProgressDrawTarget::term_like_with_hz(Box::new(Narrower(Term::buffered_stderr())), 20);
    let bar = ProgressBar::with_draw_target(None, target).with_finish(ProgressFinish::AndClear);
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Columns the spinner leaves free at the right edge: room for the `^C`
/// the terminal echoes for Ctrl-C.
const ECHO_ROOM: u16 = 3;

/// stderr as the spinner draws on it, `ECHO_ROOM` columns narrower than it
/// is. indicatif fills a spinner's line to the terminal's last column;
/// the `^C` a terminal echoes for Ctrl-C would then wrap onto a row of its
/// own, and clearing the spinner would clear that row and leave a frame on
/// the one above.
#[derive(Debug)]
struct Narrower(Term);

impl TermLike for Narrower {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(ECHO_ROOM).max(1)
    }
    fn height(&self) -> u16 {
        self.0.size().0
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Clears the spinner's line on a terminal, for an exit that skips the
/// sink's own cleanup (a second Ctrl-C).
pub(crate) fn clear_terminal_line() {
    if io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
        let _ = io::stderr().flush();
    }
}
