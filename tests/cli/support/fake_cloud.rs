//! Loopback fakes of the clouds (SPEC 22), written in Python under
//! `tests/fakes/` so that the vendors' own SDKs can be pointed at the very
//! same fake (`tests/sdk/`, run by `scripts/ci/sdk-proof.sh`): a fake the
//! SDK cannot talk to is wrong, and tinyagent is tested against it.
//!
//! Protocol every fake follows: `python3 tests/fakes/<name>.py --port 0
//! --log FILE [--script FILE] [more flags]` binds 127.0.0.1, prints its port
//! as the first line of stdout, appends each request it receives to FILE as
//! one JSON object a line, and answers as its script says.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::TestEnv;

/// A test environment for a cloud's tests: no shared health record, the
/// `retry` line given (`retry: {...}`), then `config`.
pub fn cloud_env(retry: &str, config: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{retry}{config}"));
    env
}

/// A running fake; killed when dropped.
pub struct FakeCloud {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl FakeCloud {
    /// Starts `tests/fakes/<name>.py` answering `script` (written into
    /// `env`'s files), with `args` more.
    pub fn scripted(name: &str, env: &TestEnv, script: &Value, args: &[&str]) -> FakeCloud {
        let path = env.write(
            &format!("{name}-script-{}.json", unique_suffix()),
            &script.to_string(),
        );
        let mut all = vec!["--script", path.to_str().unwrap()];
        all.extend_from_slice(args);
        FakeCloud::start(name, &env.home(), &all)
    }

    /// Starts `tests/fakes/<name>.py` with `args`, logging requests to a
    /// file in `dir`.
    pub fn start(name: &str, dir: &Path, args: &[&str]) -> FakeCloud {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fakes/{name}.py"));
        let log = dir.join(format!("{name}-{}.requests.jsonl", unique_suffix()));
        let mut child = Command::new("python3")
            .arg(&script)
            .args(["--port", "0", "--log"])
            .arg(&log)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start fake {name}: {e}"));
        let stdout = child.stdout.take().expect("fake stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("fake prints its port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("fake {name} printed {line:?}, not a port"));
        FakeCloud { child, port, log }
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>` (for `GCE_METADATA_HOST` and the like).
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("fake log line is JSON"))
            .collect()
    }

    /// The usage the fake answered through its prompt cache, one per
    /// answer, in order (`FILE.usage`, tests/fakes/prompt_cache.py).
    pub fn usages(&self) -> Vec<Value> {
        let mut path = self.log.clone().into_os_string();
        path.push(".usage");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("fake usage line is JSON"))
            .collect()
    }
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
