//! The second phase: `--sandbox` and `--worktree`, which may refuse the run
//! (exit 2) before anything is emitted. The sandbox comes first, so a
//! refused run leaves no worktree behind; a worktree moves the run's
//! working directory into it.

use super::prepare::Prepared;
use crate::sandbox::Sandbox;
use crate::settings::process_env;
use crate::worktree::{self, Worktree};

/// Why a run could not be isolated as asked.
#[derive(Debug, thiserror::Error)]
pub(super) enum IsolationError {
    #[error("--sandbox: {0}")]
    Sandbox(String),
    #[error("--worktree: {0}")]
    Worktree(String),
}

/// A prepared run with its sandbox and worktree in place.
pub(super) struct Isolated {
    pub(super) prepared: Prepared,
    pub(super) sandbox: Option<Sandbox>,
    /// The worktree's path, when `--worktree` made one.
    pub(super) worktree: Option<String>,
}

/// Starts the sandbox and creates the worktree the settings ask for.
pub(super) async fn isolate(
    mut prepared: Prepared,
    run_id: &str,
) -> Result<Isolated, IsolationError> {
    let settings = &mut prepared.settings;
    let sandbox = match &settings.sandbox {
        Some(allow) => Some(
            Sandbox::start(allow.clone(), &settings.cwd, process_env("PATH").as_deref())
                .await
                .map_err(|e| IsolationError::Sandbox(e.to_string()))?,
        ),
        None => None,
    };
    let worktree = match &settings.worktree {
        Some(name) => {
            let wt: Worktree = worktree::create(&settings.cwd, name.as_deref().unwrap_or(run_id))
                .map_err(|e| IsolationError::Worktree(e.to_string()))?;
            eprintln!("worktree: {}", wt.path.display());
            settings.cwd = wt.cwd.clone();
            Some(wt.path.display().to_string())
        }
        None => None,
    };
    Ok(Isolated {
        prepared,
        sandbox,
        worktree,
    })
}
