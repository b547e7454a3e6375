//! Child processes that never outlive the agent: each command (bash, hooks,
//! MCP servers) runs as the leader of its own session and process group,
//! dies with the agent's thread (`PR_SET_PDEATHSIG`), and is watched by a
//! guard process that kills the group when the agent's end of a pipe closes
//! (normal exit, crash or SIGKILL alike). The guard starts before the
//! command, and the command tells it its group before it runs anything, so
//! there is no moment when a killed agent leaves an unguarded group. The one
//! copy of that code.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Stdio;

use nix::fcntl::OFlag;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The process group of one command, with its guard. Dropping it kills the
/// group.
pub(crate) struct ProcessGroup {
    pgid: Option<Pid>,
    /// Our end of the guard's pipe; closing it tells the guard to kill the group.
    _lifeline: Option<OwnedFd>,
    guard: Option<std::process::Child>,
}

impl ProcessGroup {
    /// Starts the guard and makes `command`, once spawned, the leader of a
    /// new session (so of a new process group) that is killed if the agent
    /// dies. The guard is best effort: if it cannot start, the group is
    /// still killed by us on every path we control.
    pub(crate) fn prepare(command: &mut Command) -> ProcessGroup {
        let (lifeline, guard) = match start_guard() {
            Some((fd, guard)) => (Some(fd), Some(guard)),
            None => (None, None),
        };
        let report: Option<RawFd> = lifeline.as_ref().map(|fd| fd.as_raw_fd());
        // SAFETY: only async-signal-safe calls (setsid, prctl, getpid, write)
        // on the child's own state and an inherited descriptor; no allocation.
        unsafe {
            command.pre_exec(move || {
                let _ = nix::unistd::setsid();
                #[cfg(target_os = "linux")]
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                if let Some(fd) = report {
                    let mut line = [0u8; 24];
                    let len = pid_line(nix::unistd::getpid().as_raw(), &mut line);
                    let _ = libc::write(fd, line.as_ptr().cast(), len);
                }
                Ok(())
            });
        }
        ProcessGroup {
            pgid: None,
            _lifeline: lifeline,
            guard,
        }
    }

    /// Records the group led by the spawned command (`pid`: its id).
    pub(crate) fn started(&mut self, pid: Option<u32>) {
        self.pgid = pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 0)
            .map(Pid::from_raw);
    }

    /// Kills the whole process group.
    pub(crate) fn kill(&self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
        // The guard is for the agent's death; here we killed the group ourselves.
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.kill();
            let _ = guard.wait();
        }
    }
}

/// Writes `pid` and a newline into `out` without allocating; returns the length.
fn pid_line(pid: i32, out: &mut [u8; 24]) -> usize {
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        n /= 10;
        len += 1;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    out[len] = b'\n';
    len + 1
}

/// A spawned command with its process group.
pub(crate) struct GuardedChild {
    pub child: Child,
    group: ProcessGroup,
}

impl GuardedChild {
    /// Spawns `command` as the leader of a new, guarded process group.
    pub(crate) fn spawn(mut command: Command) -> std::io::Result<GuardedChild> {
        let mut group = ProcessGroup::prepare(&mut command);
        command.kill_on_drop(true);
        let child = command.spawn()?;
        group.started(child.id());
        Ok(GuardedChild { child, group })
    }

    /// Kills the whole process group.
    pub(crate) fn kill_group(&mut self) {
        self.group.kill();
    }
}

/// Starts `sh` reading a pipe: first the group id (written by the command
/// itself before it execs), then, when the pipe's write end (kept by us,
/// close-on-exec) closes, it kills that group.
fn start_guard() -> Option<(OwnedFd, std::process::Child)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).ok()?;
    let script = "read pgid || exit 0; read _ignored; kill -9 -\"$pgid\" 2>/dev/null";
    let guard = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    Some((write, guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_lines() {
        let mut out = [0u8; 24];
        let len = pid_line(4_194_304, &mut out);
        assert_eq!(&out[..len], b"4194304\n");
        let len = pid_line(7, &mut out);
        assert_eq!(&out[..len], b"7\n");
    }

    /// Reads the first line of `out` (a pid the command printed).
    async fn first_pid(out: &mut tokio::process::ChildStdout) -> i32 {
        use tokio::io::AsyncReadExt;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        String::from_utf8(line).unwrap().trim().parse().unwrap()
    }

    /// A shell that starts a grandchild, prints its pid and waits for it.
    fn sleeper() -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("sleep 30 & echo $!; wait")
            .stdout(Stdio::piped());
        cmd
    }

    /// Fails unless `pid` is gone (or a zombie) within two seconds.
    async fn assert_dies(pid: i32) {
        for _ in 0..200 {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("process {pid} outlived its group");
    }

    #[tokio::test]
    async fn the_guard_alone_kills_the_group_when_our_end_closes() {
        let mut cmd = sleeper();
        let mut group = ProcessGroup::prepare(&mut cmd);
        // Not `started`: the guard learns the group from the command itself.
        let mut child = cmd.spawn().unwrap();
        let grandchild = first_pid(child.stdout.as_mut().unwrap()).await;
        // What the agent's death does: our end closes, nobody kills anything.
        group._lifeline = None;
        assert_dies(grandchild).await;
        let _ = child.wait().await;
    }

    #[tokio::test]
    async fn dropping_the_group_kills_its_grandchildren() {
        let cmd = sleeper();
        let mut guarded = GuardedChild::spawn(cmd).unwrap();
        let grandchild = first_pid(guarded.child.stdout.as_mut().unwrap()).await;
        drop(guarded);
        assert_dies(grandchild).await;
    }
}
