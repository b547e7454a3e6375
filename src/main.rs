//! The binary: parse flags, run, map the result to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    // The sandbox's in-namespace proxy forwarder: an internal mode, not a flag.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == tinyagent::sandbox::forward::ARG)
    {
        let code = tinyagent::sandbox::forward::main(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match tinyagent::cli::Cli::from_args() {
        Ok(cli) => cli,
        Err(e) => return tinyagent::cli::exit_on_parse_error(e),
    };
    let code = tinyagent::run(cli);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
