//! `--sandbox` (SPEC section 12): `bash` commands run under bubblewrap with
//! a read-only view of the machine, a writable working directory and a
//! private `/tmp`, no capabilities, and their own network namespace whose
//! only way out is the filtering proxy (`proxy.rs`), reached through a
//! forwarder on the sandbox's loopback (`forward.rs`). If any of that cannot
//! be set up, the run is refused (exit 2): it never runs unsandboxed.

pub(crate) mod allow;
pub mod forward;
mod proxy;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

pub use allow::Allowlist;

use crate::tools::bash::CommandBuilder;
use crate::tools::ToolCtx;
use proxy::Proxy;

/// A sandbox ready for commands; its proxy serves while this lives.
pub struct Sandbox {
    bwrap: PathBuf,
    exe: PathBuf,
    no_proxy: String,
    proxy: Proxy,
}

/// Why the sandbox is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("bubblewrap (bwrap) was not found on PATH; install it (Debian/Ubuntu: apt-get install bubblewrap)")]
    NoBwrap,
    #[error("cannot locate the tinyagent binary: {0}")]
    NoExe(std::io::Error),
    #[error("cannot start the sandbox's network proxy: {0}")]
    Proxy(std::io::Error),
    #[error("cannot run {}: {error}", bwrap.display())]
    CannotRun {
        bwrap: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The trial command failed: its exit status and first line.
    #[error("bubblewrap cannot create a sandbox on this machine ({0})")]
    Refused(String),
}

impl Sandbox {
    /// Finds bubblewrap on `path_var` (the `PATH` value), starts the proxy,
    /// and runs a trial command in a sandbox for `cwd`. The error says why
    /// the sandbox is unavailable.
    pub async fn start(
        allow: Allowlist,
        cwd: &Path,
        path_var: Option<&str>,
    ) -> Result<Sandbox, SandboxError> {
        let bwrap = find_on_path("bwrap", path_var).ok_or(SandboxError::NoBwrap)?;
        let exe = std::env::current_exe().map_err(SandboxError::NoExe)?;
        let no_proxy = no_proxy(&allow);
        let proxy = Proxy::start(allow).map_err(SandboxError::Proxy)?;
        let sandbox = Sandbox {
            bwrap,
            exe,
            no_proxy,
            proxy,
        };
        let out = sandbox
            .command(cwd, &["true".into()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|error| SandboxError::CannotRun {
                bwrap: sandbox.bwrap.clone(),
                error,
            })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout);
            let said = said
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            return Err(SandboxError::Refused(format!(
                "{}: {}",
                out.status,
                said.trim()
            )));
        }
        Ok(sandbox)
    }

    /// The `bash` tool's way of starting commands in this sandbox.
    pub fn bash(&self) -> SandboxBash {
        SandboxBash {
            bwrap: self.bwrap.clone(),
            exe: self.exe.clone(),
            no_proxy: self.no_proxy.clone(),
            proxy_dir: self.proxy.dir().to_path_buf(),
            socket: self.proxy.socket().to_path_buf(),
        }
    }

    fn command(&self, cwd: &Path, inner: &[OsString]) -> Command {
        self.bash().command(cwd, inner)
    }
}

/// Starts `bash -c` commands inside the sandbox (a `CommandBuilder`).
pub struct SandboxBash {
    bwrap: PathBuf,
    exe: PathBuf,
    no_proxy: String,
    proxy_dir: PathBuf,
    socket: PathBuf,
}

impl SandboxBash {
    /// `bwrap <isolation> -- tinyagent __sandbox-forward <socket> -- <inner>`,
    /// started through `bash` so bubblewrap's own errors reach stdout.
    fn command(&self, cwd: &Path, inner: &[OsString]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg("exec 2>&1; exec \"$0\" \"$@\"")
            .arg(&self.bwrap)
            .args(bwrap_args(cwd, &self.exe, &self.proxy_dir))
            .arg(&self.exe)
            .arg(forward::ARG)
            .arg(&self.socket)
            .arg(&self.no_proxy)
            .arg("--")
            .args(inner)
            .current_dir(cwd);
        cmd
    }
}

impl CommandBuilder for SandboxBash {
    fn build(&self, script: &str, ctx: &ToolCtx) -> Command {
        let inner = [
            "bash".into(),
            "-c".into(),
            format!("exec 2>&1\n{script}").into(),
        ];
        self.command(&ctx.cwd, &inner)
    }
}

/// `NO_PROXY` inside the sandbox: the loopback names the allowlist leaves out.
fn no_proxy(allow: &Allowlist) -> String {
    let names: Vec<&str> = forward::LOOPBACK
        .iter()
        .copied()
        .filter(|n| !allow.allows(n))
        .collect();
    names.join(",")
}

/// The isolation: read-only root, private /tmp and /dev, writable `cwd`,
/// no network but loopback, own PID/IPC/UTS namespaces, no capabilities,
/// killed with its parent. Later mounts win, so `cwd` stays writable even
/// under /tmp.
fn bwrap_args(cwd: &Path, exe: &Path, proxy_dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--setenv",
        "TMPDIR",
        "/tmp",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    for (flag, path) in [("--ro-bind", exe), ("--bind", proxy_dir), ("--bind", cwd)] {
        args.extend([flag.into(), path.into(), path.into()]);
    }
    // What git runs later, outside the sandbox, stays read-only: a command
    // must not plant hooks or config that escape on the user's next commit.
    for protected in [".git/hooks", ".git/config"] {
        let path = cwd.join(protected);
        if path.exists() {
            args.extend(["--ro-bind".into(), path.clone().into(), path.into()]);
        }
    }
    args.extend(["--chdir".into(), cwd.into(), "--".into()]);
    args
}

/// The first executable file called `name` in the directories of `path_var`.
fn find_on_path(name: &str, path_var: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path_var?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_directory_is_bound_after_the_private_tmp() {
        let args = bwrap_args(
            Path::new("/tmp/w"),
            Path::new("/bin/ta"),
            Path::new("/tmp/p"),
        );
        let pos = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert!(pos("--tmpfs") < pos("/tmp/w"));
        assert!(args.contains(&"--unshare-net".into()));
        assert_eq!(args.last().unwrap(), "--");
    }

    #[test]
    fn git_hooks_and_config_in_the_working_directory_stay_read_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "").unwrap();
        let args = bwrap_args(dir.path(), Path::new("/bin/ta"), Path::new("/tmp/p"));
        let hooks = dir.path().join(".git/hooks");
        let at = args.iter().position(|a| a == hooks.as_os_str()).unwrap();
        assert_eq!(args[at - 1], "--ro-bind");
        assert!(at > args.iter().position(|a| a == "--bind").unwrap());
        assert!(args.contains(&dir.path().join(".git/config").into()));
    }

    #[test]
    fn loopback_names_bypass_the_proxy_unless_allowed() {
        assert_eq!(no_proxy(&Allowlist::default()), "localhost,127.0.0.1,::1");
        let allow = Allowlist::parse(&["localhost".to_string()]).unwrap();
        assert_eq!(no_proxy(&allow), "127.0.0.1,::1");
    }

    #[test]
    fn path_lookup_needs_an_executable_file() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("bwrap");
        std::fs::write(&plain, "").unwrap();
        let path = dir.path().to_str().unwrap();
        assert_eq!(find_on_path("bwrap", Some(path)), None);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_on_path("bwrap", Some(path)), Some(plain));
        assert_eq!(find_on_path("bwrap", None), None);
    }
}
