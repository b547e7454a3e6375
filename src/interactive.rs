//! Interactive sessions (SPEC section 14).

use crate::cli::Cli;

/// Whether these flags start an interactive session.
pub fn wanted(_cli: &Cli) -> Result<bool, String> {
    Ok(false)
}

/// Runs an interactive session and returns its exit code.
pub fn session(cli: Cli) -> i32 {
    crate::run_one(&cli, crate::Start::default()).code
}
