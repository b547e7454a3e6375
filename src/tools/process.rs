//! Child processes that never outlive the agent: each command runs in its
//! own process group, watched by a guard process that kills the group when
//! the agent's end of a pipe closes (normal exit, crash or SIGKILL alike).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;

use tokio::process::{Child, Command};

/// A spawned command with its process-group guard.
pub struct GuardedChild {
    pub child: Child,
    pgid: i32,
    /// Our end of the guard's pipe; dropping it tells the guard to kill the group.
    _lifeline: Option<OwnedFd>,
    guard: Option<std::process::Child>,
}

impl GuardedChild {
    /// Spawns `command` as the leader of a new process group and starts its
    /// guard. The guard is best effort: if it cannot start, the command still
    /// runs and is killed by us on every path we control.
    pub fn spawn(mut command: Command) -> std::io::Result<GuardedChild> {
        // SAFETY: setsid and prctl are async-signal-safe and touch only the child.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                #[cfg(target_os = "linux")]
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        command.kill_on_drop(true);
        let child = command.spawn()?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let (lifeline, guard) = match start_guard(pgid) {
            Some((fd, guard)) => (Some(fd), Some(guard)),
            None => (None, None),
        };
        Ok(GuardedChild {
            child,
            pgid,
            _lifeline: lifeline,
            guard,
        })
    }

    /// Kills the whole process group.
    pub fn kill_group(&mut self) {
        if self.pgid > 0 {
            // SAFETY: plain syscall on a process group we created.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GuardedChild {
    fn drop(&mut self) {
        self.kill_group();
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.kill();
            let _ = guard.wait();
        }
    }
}

/// Starts `sh` waiting on a pipe; when the pipe's write end (kept by us,
/// close-on-exec) closes, it kills process group `pgid`.
pub(crate) fn start_guard(pgid: i32) -> Option<(OwnedFd, std::process::Child)> {
    if pgid <= 0 {
        return None;
    }
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two fresh descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: both descriptors were just created and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let script = format!("read _ignored; kill -9 -{pgid} 2>/dev/null");
    let guard = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let _ = write.as_raw_fd();
    Some((write, guard))
}
