//! A real `redis-server` for one test: a free loopback port, persistence
//! off, stopped when dropped (`.ci/run` installs Debian's redis-server).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    /// Starts a server with `extra` arguments (e.g. `--requirepass`).
    pub fn start(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is needed for these tests (.ci/run installs it)");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            child: Some(child),
            port,
        }
    }

    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Every key and value the server holds, as text (for leak checks).
    pub fn dump(&self) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--no-auth-warning"])
            .args(["--scan"])
            .output()
            .expect("redis-cli");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        for key in String::from_utf8_lossy(&out.stdout).lines() {
            let kind = Command::new("redis-cli")
                .args(["-p", &self.port.to_string(), "TYPE", key])
                .output()
                .unwrap();
            let cmd = match String::from_utf8_lossy(&kind.stdout).trim() {
                "hash" => vec!["HGETALL", key],
                "zset" => vec!["ZRANGE", key, "0", "-1", "WITHSCORES"],
                _ => vec!["GET", key],
            };
            let v = Command::new("redis-cli")
                .args(["-p", &self.port.to_string()])
                .args(cmd)
                .output()
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&v.stdout));
        }
        text
    }

    /// Stops the server now.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
