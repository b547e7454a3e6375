//! Ctrl-C and SIGTERM: the first stops the run cleanly through its
//! cancellation token, a second exits at once.

use tokio_util::sync::CancellationToken;

use crate::exit::Status;

/// Cancels `token` on Ctrl-C or SIGTERM; a second signal exits at once.
pub(crate) fn watch(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    // Registered now, not when the task first runs: a signal that comes
    // before the run's first await must still end it cleanly.
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            tokio::select! {
                Some(()) = next_signal(&mut int) => {}
                Some(()) = next_signal(&mut term) => crate::stop::mark_terminated(),
                else => return,
            }
            count += 1;
            if count > 1 {
                crate::approval::restore_terminal();
                crate::events::human::clear_terminal_line();
                std::process::exit(Status::Interrupted.exit_code());
            }
            token.cancel();
        }
    });
}

/// The next delivery of a signal, or never when it could not be watched.
async fn next_signal(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
