//! The binary: parse flags, run, map the result to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tinyagent::cli::Cli::parse();
    let code = tinyagent::run(cli);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
