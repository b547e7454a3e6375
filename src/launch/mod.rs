//! One run, in phases, each a type: `prepare` (everything that can fail
//! before anything is emitted: the checkpoint to resume, settings, the
//! chains, the job options, the log database) gives `Prepared`; `isolate`
//! (`--sandbox`, `--worktree`) gives `Isolated`; `wire` (sinks, the emitter,
//! the document, MCP servers, tools, the health record) gives the `Agent`
//! and what the end of the run needs; `finish` prints the answer and the
//! resume hint. Warnings found on the way go into one `Diagnostics`,
//! emitted just after `run.started`.

mod diagnostics;
mod finish;
mod isolate;
mod prepare;
mod wire;

use crate::cli::Cli;
use crate::exit;
use crate::interactive::{Ended, Start};

pub(crate) use diagnostics::{Diagnostics, Origin};

/// Prepares and runs one run on its own runtime.
pub(crate) fn run_one(cli: &Cli, start: Start) -> Ended {
    let prepared = match prepare::prepare(cli, start) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            return Ended::not_started(exit::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinyagent: error: cannot start the async runtime: {e}");
            return Ended::not_started(1);
        }
    };
    runtime.block_on(run_prepared(prepared))
}

/// The phases after `prepare`, on the run's runtime.
async fn run_prepared(prepared: prepare::Prepared) -> Ended {
    let run_id = uuid::Uuid::new_v4().to_string();
    let isolated = match isolate::isolate(prepared, &run_id).await {
        Ok(isolated) => isolated,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            return Ended::not_started(exit::USAGE);
        }
    };
    let wired = wire::wire(isolated, run_id).await;
    finish::run_to_the_end(wired).await
}
