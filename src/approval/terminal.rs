//! Asking on the terminal: the question on stderr, then keys read in raw
//! mode from stdin's terminal (opened anew, so its non-blocking reads are
//! ours alone) until they make an answer. The wait races the run's stop
//! (SIGTERM, the time limit), and the terminal is always put back as it
//! was, even on the way out of a second Ctrl-C.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::answer::{Answer, Fed, Keys};
use super::question::{Paint, Prompt, Question};
use crate::stop::Stop;

/// How long after `y` or `a` more input marks them as part of a paste.
const SETTLE: Duration = Duration::from_millis(30);
/// How long after `y` or `a` an Enter pressed out of habit is taken with
/// them (left alone, it would be an empty line at the session's next
/// prompt, which asks again).
const HABIT: Duration = Duration::from_millis(250);
/// The quiet that ends a paste or a burst of keys being discarded.
const QUIET: Duration = Duration::from_millis(100);

/// Turns the terminal's bracketed paste on and off.
const PASTE_ON: &str = "\x1b[?2004h";
const PASTE_OFF: &str = "\x1b[?2004l";

/// Why no answer came.
#[derive(Debug)]
pub(crate) enum NoAnswer {
    /// The run stopped while waiting (SIGTERM, the time limit).
    Stopped,
    /// The terminal could not be opened or set up.
    NoTerminal(std::io::Error),
}

/// The terminal mode to put back if the process exits during a question.
static SAVED: Mutex<Option<(RawFd, Termios)>> = Mutex::new(None);

/// Puts the terminal back as it was before a question, for an exit that
/// skips the question's own cleanup (a second signal).
pub(crate) fn restore_terminal() {
    let saved = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((fd, mode)) = saved {
        // SAFETY: the descriptor is the question's open terminal; the
        // process exits right after.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let _ = termios::tcsetattr(fd, SetArg::TCSANOW, &mode);
        eprint!("{PASTE_OFF}");
    }
}

/// The terminal in raw mode for one question; put back on drop.
struct Raw {
    fd: AsyncFd<File>,
    /// The mode before the question (a `Mutex` only to be `Sync`).
    saved: Mutex<Termios>,
}

impl Raw {
    /// Opens stdin's terminal (else the controlling one) and sets raw
    /// input, keeping output processing so `\n` still starts a line.
    fn open() -> std::io::Result<Raw> {
        let path = nix::unistd::ttyname(std::io::stdin())
            .unwrap_or_else(|_| std::path::PathBuf::from("/dev/tty"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)?;
        let saved = termios::tcgetattr(file.as_fd())?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        raw.output_flags = saved.output_flags;
        termios::tcsetattr(file.as_fd(), SetArg::TCSANOW, &raw)?;
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some((file.as_raw_fd(), saved.clone()));
        // Keys typed before the question was shown do not answer it.
        let _ = termios::tcflush(file.as_fd(), termios::FlushArg::TCIFLUSH);
        // SAFETY: `file` is open, owned by the `AsyncFd` for its whole life.
        let fd = match unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) } {
            Ok(fd) => fd,
            Err(e) => {
                let (file, e) = e.into_parts();
                let _ = termios::tcsetattr(file.as_fd(), SetArg::TCSANOW, &saved);
                SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
                return Err(e);
            }
        };
        Ok(Raw {
            fd,
            saved: Mutex::new(saved),
        })
    }

    /// One read's bytes (0: the end of input).
    async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|inner| inner.get_ref().read(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Reads one burst, or `None` after `wait` of quiet.
    async fn read_within(&self, buf: &mut [u8], wait: Duration) -> Option<std::io::Result<usize>> {
        tokio::time::timeout(wait, self.read(buf)).await.ok()
    }

    /// Discards input until it has been quiet for `QUIET` (a paste, keys
    /// held down); Ctrl-C alone or the end of input still answer.
    async fn drain(&self, buf: &mut [u8]) -> Option<Answer> {
        loop {
            match self.read_within(buf, QUIET).await {
                None => return None,
                Some(Ok(0) | Err(_)) => return Some(Answer::Eof),
                Some(Ok(n)) if buf[..n] == [0x03] => return Some(Answer::Interrupted),
                Some(Ok(_)) => {}
            }
        }
    }

    /// Whether `y` or `a` stands: nothing but Enter follows it at once
    /// (else it is a paste). An Enter pressed just after is taken with it.
    async fn settled(&self, buf: &mut [u8]) -> bool {
        let started = tokio::time::Instant::now();
        loop {
            let settling = started.elapsed() < SETTLE;
            let until = if settling { SETTLE } else { HABIT };
            let Some(wait) = until.checked_sub(started.elapsed()) else {
                return true;
            };
            match self.read_within(buf, wait).await {
                None if settling => {}
                None | Some(Ok(0) | Err(_)) => return true,
                Some(Ok(n)) if buf[..n].iter().all(|b| matches!(b, b'\r' | b'\n')) => return true,
                // More keys at once: a paste. Later: a stray key, dropped.
                Some(Ok(_)) => return !settling,
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let _ = termios::tcsetattr(self.fd.get_ref().as_fd(), SetArg::TCSANOW, &saved);
        SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

fn show(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Asks `question` and waits for the answer, or for the run to stop.
pub(crate) async fn ask(
    question: &Question,
    width: usize,
    paint: Paint,
    stop: &Stop,
) -> Result<Answer, NoAnswer> {
    let raw = Raw::open().map_err(NoAnswer::NoTerminal)?;
    let prompt = question.prompt(Prompt::Asking { again: false }, width, paint);
    show(&format!("{PASTE_ON}{}{prompt}", question.body));
    let outcome = tokio::select! {
        answer = read_answer(&raw, question, width, paint) => Ok(answer),
        _ = stop.fired() => Err(NoAnswer::Stopped),
    };
    let last = match &outcome {
        Ok(answer) => question.prompt(Prompt::Answered(answer), width, paint),
        Err(_) => question.prompt(Prompt::Stopped, width, paint),
    };
    show(&format!("\r\x1b[K{last}\n{PASTE_OFF}"));
    drop(raw);
    outcome
}

/// Reads keys until they make an answer.
async fn read_answer(raw: &Raw, question: &Question, width: usize, paint: Paint) -> Answer {
    let mut keys = Keys::offering_always(question.offers_always());
    let mut buf = vec![0u8; 4096];
    loop {
        let n = match raw.read(&mut buf).await {
            Ok(0) | Err(_) => return Answer::Eof,
            Ok(n) => n,
        };
        let again = match keys.feed(&buf[..n]) {
            Fed::Answer(answer @ (Answer::Yes | Answer::Always)) => {
                if raw.settled(&mut buf).await {
                    return answer;
                }
                true
            }
            Fed::Answer(answer) => return answer,
            Fed::Again => true,
            Fed::Pending => false,
        };
        if again {
            if let Some(answer) = raw.drain(&mut buf).await {
                return answer;
            }
            keys.reset_input();
        }
        let reason;
        let state = if keys.declining() {
            reason = keys.reason();
            Prompt::Reason(&reason)
        } else {
            Prompt::Asking { again }
        };
        show(&format!("\r\x1b[K{}", question.prompt(state, width, paint)));
    }
}

/// The terminal's width in columns (80 when it cannot be told).
pub(crate) fn width() -> usize {
    console::Term::stderr()
        .size_checked()
        .map(|(_, w)| w as usize)
        .filter(|w| *w >= 20)
        .unwrap_or(80)
}
