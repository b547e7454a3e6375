//! Child processes that never outlive the agent: each command (bash, hooks,
//! MCP servers) runs as the leader of its own session and process group,
//! dies with the agent's thread (`PR_SET_PDEATHSIG`), and is watched by a
//! guard process that kills the group when the agent's end of a pipe closes
//! (normal exit, crash or SIGKILL alike). The one copy of that code.

use std::os::fd::OwnedFd;
use std::process::Stdio;

use nix::fcntl::OFlag;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// Makes `command`, once spawned, the leader of a new session (so of a new
/// process group) that is killed if the agent dies.
pub(crate) fn isolate(command: &mut Command) {
    // SAFETY: setsid and prctl are async-signal-safe and touch only the child.
    unsafe {
        command.pre_exec(|| {
            let _ = nix::unistd::setsid();
            #[cfg(target_os = "linux")]
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            Ok(())
        });
    }
}

/// The process group of a child spawned after `isolate`, with its guard.
/// Dropping it kills the group.
pub(crate) struct ProcessGroup {
    pgid: Option<Pid>,
    /// Our end of the guard's pipe; closing it tells the guard to kill the group.
    lifeline: Option<OwnedFd>,
    guard: Option<std::process::Child>,
}

impl ProcessGroup {
    /// Watches the group led by `pid` (the child's id; `None` once it was
    /// reaped). The guard is best effort: if it cannot start, the group is
    /// still killed by us on every path we control.
    pub(crate) fn watch(pid: Option<u32>) -> ProcessGroup {
        let pgid = pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 0)
            .map(Pid::from_raw);
        let (lifeline, guard) = match pgid.and_then(start_guard) {
            Some((fd, guard)) => (Some(fd), Some(guard)),
            None => (None, None),
        };
        ProcessGroup {
            pgid,
            lifeline,
            guard,
        }
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
        self.lifeline = None;
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.kill();
            let _ = guard.wait();
        }
    }
}

/// A spawned command with its process group.
pub struct GuardedChild {
    pub child: Child,
    group: ProcessGroup,
}

impl GuardedChild {
    /// Spawns `command` as the leader of a new process group and starts its
    /// guard.
    pub fn spawn(mut command: Command) -> std::io::Result<GuardedChild> {
        isolate(&mut command);
        command.kill_on_drop(true);
        let child = command.spawn()?;
        let group = ProcessGroup::watch(child.id());
        Ok(GuardedChild { child, group })
    }

    /// Kills the whole process group.
    pub fn kill_group(&mut self) {
        self.group.kill();
    }
}

/// Starts `sh` waiting on a pipe; when the pipe's write end (kept by us,
/// close-on-exec) closes, it kills process group `pgid`.
fn start_guard(pgid: Pid) -> Option<(OwnedFd, std::process::Child)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).ok()?;
    let script = format!("read _ignored; kill -9 -{pgid} 2>/dev/null");
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

    #[tokio::test]
    async fn dropping_the_group_kills_its_grandchildren() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("sleep 30 & echo $!; wait")
            .stdout(Stdio::piped());
        let mut guarded = GuardedChild::spawn(cmd).unwrap();
        let mut out = guarded.child.stdout.take().unwrap();
        let mut line = Vec::new();
        use tokio::io::AsyncReadExt;
        let mut byte = [0u8; 1];
        while out.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let grandchild: i32 = String::from_utf8(line).unwrap().trim().parse().unwrap();
        drop(guarded);
        // The kill is synchronous: the grandchild is gone or a zombie of init.
        let mut gone = false;
        for _ in 0..200 {
            let state =
                std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(gone, "process {grandchild} outlived its group");
    }
}
