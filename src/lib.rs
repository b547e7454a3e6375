//! tinyagent: a command-line coding agent that survives provider outages.
//!
//! `run` picks the mode (`--check`, `--generate`, a session or one run);
//! `launch` wires one run in phases. See CONTRIBUTING.md for the map of
//! the code.

pub(crate) mod agent;
pub(crate) mod approval;
pub(crate) mod approval_config;
pub(crate) mod budget;
pub(crate) mod check;
pub mod cli;
pub(crate) mod config;
pub(crate) mod conversation;
pub(crate) mod duration;
pub mod events;
pub mod exit;
#[cfg(test)]
mod fuzz_tests;
pub mod health;
pub(crate) mod help;
pub(crate) mod interactive;
pub(crate) mod launch;
pub(crate) mod mcp;
pub mod model;
pub(crate) mod paths;
pub mod policy;
pub(crate) mod prompt_cache;
pub mod reason;
pub(crate) mod regions;
pub(crate) mod resume;
pub mod runs;
pub mod sandbox;
pub(crate) mod settings;
pub(crate) mod setup;
pub(crate) mod signals;
pub(crate) mod start_warnings;
pub(crate) mod stop;
pub(crate) mod suggest;
pub(crate) mod task_input;
pub(crate) mod text_edit;
pub(crate) mod tools;
pub mod trajectory;
pub(crate) mod wire_api;
pub(crate) mod worktree;

use cli::Cli;
use interactive::Start;
use launch::run_one;
use settings::process_env;

/// Runs tinyagent for parsed flags and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    if cli.check {
        return check::run(&cli, &process_env);
    }
    if let Some(kind) = cli.generate {
        return help::generate(kind, <Cli as clap::CommandFactory>::command());
    }
    match interactive::wanted(&cli) {
        Ok(true) => interactive::session(cli, run_one),
        Ok(false) => run_one(&cli, Start::default()).code,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            exit::USAGE
        }
    }
}
