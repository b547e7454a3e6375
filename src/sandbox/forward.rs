//! The sandbox's side of the proxy: run as `tinyagent __sandbox-forward
//! <socket> <no_proxy> -- <command>...` inside bubblewrap, it listens on the sandbox's
//! own loopback, pipes each connection to the proxy's Unix socket, and runs
//! the command with the proxy variables pointing at it. It exits with the
//! command's exit code.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use tokio::net::{TcpListener, TcpStream, UnixStream};

/// The hidden first argument that selects this mode.
pub const ARG: &str = "__sandbox-forward";

/// Loopback names: they mean the sandbox itself and bypass the proxy, unless
/// the allowlist names them (then they mean the host's loopback, through it).
pub const LOOPBACK: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// Runs the forwarder with the arguments after [`ARG`]; returns the exit code.
pub fn main(args: &[OsString]) -> i32 {
    let (socket, no_proxy, command) = match args {
        [socket, no_proxy, sep, command @ ..] if sep == "--" && !command.is_empty() => {
            (PathBuf::from(socket), no_proxy, command)
        }
        _ => {
            eprintln!("tinyagent: {ARG} expects <socket> <no_proxy> -- <command>...");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinyagent sandbox: cannot start the runtime: {e}");
            return 125;
        }
    };
    runtime.block_on(forward(socket, no_proxy, command))
}

async fn forward(socket: PathBuf, no_proxy: &OsString, command: &[OsString]) -> i32 {
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tinyagent sandbox: cannot listen on the sandbox loopback: {e}");
            return 125;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let proxy = format!("http://127.0.0.1:{port}");
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env(var, &proxy);
    }
    cmd.env("NO_PROXY", no_proxy).env("no_proxy", no_proxy);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "tinyagent sandbox: cannot run {}: {e}",
                command[0].to_string_lossy()
            );
            return 127;
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(s) => s.code().or_else(|| s.signal().map(|sig| 128 + sig)).unwrap_or(1),
                    Err(_) => 1,
                };
            }
            accepted = listener.accept() => {
                if let Ok((conn, _)) = accepted {
                    tokio::spawn(pipe(conn, socket.clone()));
                }
            }
        }
    }
}

async fn pipe(mut conn: TcpStream, socket: PathBuf) {
    if let Ok(mut proxy) = UnixStream::connect(&socket).await {
        let _ = tokio::io::copy_bidirectional(&mut conn, &mut proxy).await;
    }
}
