//! `install.sh` (SPEC 21) run as `curl … | sh` runs it (the script on
//! stdin of `sh`), against a loopback server serving a release layout
//! built from the binary under test: `<base>/v<version>/<archive>`, its
//! `.sha256`, and `<base>/latest`. `uname` is faked through `PATH`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::stub::{End, Reply, Stub};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
const TARGET: &str = "x86_64-unknown-linux-musl";

/// The release directory (`v<version>/…` and `latest`), built once.
pub fn release() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        forget_old_releases(tmp);
        let root = tmp.join(format!("install-release-{}", std::process::id()));
        let name = format!("tinyagent-{VERSION}-{TARGET}");
        let stage = root.join("stage").join(&name);
        std::fs::create_dir_all(&stage).unwrap();
        let binary = stage.join("tinyagent");
        std::fs::copy(assert_cmd::cargo::cargo_bin("tinyagent"), &binary).unwrap();
        // Smaller and faster to pack; the binary still runs without it.
        let _ = Command::new("strip").arg(&binary).status();
        let root_dir = env!("CARGO_MANIFEST_DIR");
        for file in ["README.md", "LICENSE"] {
            std::fs::copy(Path::new(root_dir).join(file), stage.join(file)).unwrap();
        }
        let tag = root.join(format!("v{VERSION}"));
        std::fs::create_dir_all(&tag).unwrap();
        let archive = tag.join(format!("{name}.tar.gz"));
        let packed = Command::new("sh")
            .arg("-c")
            .arg(r#"tar -C "$1" -cf - "$2" | gzip -1 > "$3""#)
            .args(["sh", root.join("stage").to_str().unwrap(), &name])
            .arg(&archive)
            .status()
            .unwrap();
        assert!(packed.success());
        let sum = Command::new("sh")
            .args([
                "-c",
                r#"sha256sum "$1" 2>/dev/null || shasum -a 256 "$1""#,
                "sh",
            ])
            .arg(format!("{name}.tar.gz"))
            .current_dir(&tag)
            .output()
            .unwrap();
        assert!(sum.status.success());
        std::fs::write(tag.join(format!("{name}.tar.gz.sha256")), &sum.stdout).unwrap();
        std::fs::write(root.join("latest"), format!("v{VERSION}\n")).unwrap();
        root
    })
}

/// Removes the layouts earlier test runs left (an hour old or more).
fn forget_old_releases(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(3600));
        if old
            && entry
                .file_name()
                .to_string_lossy()
                .starts_with("install-release-")
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Serves `dir` under `/releases/`, 404 for anything else; every request's
/// path is recorded by the stub.
pub fn serve(dir: PathBuf) -> Stub {
    Stub::start(move |_, req| {
        let file = req
            .path
            .strip_prefix("/releases/")
            .map(|p| dir.join(p))
            .filter(|p| !req.path.contains("..") && p.is_file());
        match file {
            Some(path) => Reply {
                status: 200,
                headers: vec![("content-type".into(), "application/octet-stream".into())],
                delay: Duration::ZERO,
                chunks: vec![(Duration::ZERO, std::fs::read(path).unwrap())],
                end: End::Complete,
            },
            None => Reply::status(404),
        }
    })
}

/// A temp place with a fake `uname` first on `PATH`.
pub struct Machine {
    pub dir: tempfile::TempDir,
}

impl Machine {
    pub fn new(os: &str, arch: &str) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("fakebin");
        std::fs::create_dir_all(&bin).unwrap();
        let uname = bin.join("uname");
        std::fs::write(
            &uname,
            format!("#!/bin/sh\ncase \"$1\" in -m) echo {arch} ;; *) echo {os} ;; esac\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&uname, std::fs::Permissions::from_mode(0o755)).unwrap();
        Machine { dir }
    }

    pub fn install_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// `sh` reading install.sh on stdin, with `vars` set.
    fn install(&self, vars: &[(&str, &str)], on_path: bool) -> Output {
        let script =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh")).unwrap();
        let mut path = self.path();
        if on_path {
            path = format!("{}:{path}", self.install_dir().display());
        }
        let mut cmd = Command::new("sh");
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", self.dir.path().join("home"))
            .env("TINYAGENT_INSTALL_DIR", self.install_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(&script).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Whatever is in the install directory (it may not exist).
    /// `PATH` with the fake `uname` first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().join("fakebin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn installed(&self) -> Vec<String> {
        std::fs::read_dir(self.install_dir())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A failure: non-zero, one line on stderr starting as the script's errors
/// do and holding `why`, nothing installed.
fn assert_refused(out: &Output, machine: &Machine, why: &str) {
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tinyagent install: error: "), "{stderr}");
    assert!(stderr.contains(why), "{stderr}");
    assert!(machine.installed().is_empty(), "{:?}", machine.installed());
}

#[test]
fn installs_the_latest_or_a_given_version_and_says_whether_its_dir_is_on_path() {
    let stub = serve(release().to_path_buf());
    let base = format!("{}/releases", stub.url());
    let machine = Machine::new("Linux", "x86_64");
    let out = machine.install(&[("TINYAGENT_DOWNLOAD_URL", &base)], false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = machine.install_dir();
    assert_eq!(
        text(&out.stdout),
        format!(
            "tinyagent {VERSION} installed to {d}/tinyagent\n{d} is not on your PATH: add it with  export PATH=\"{d}:$PATH\"  (in your shell's profile), or run {d}/tinyagent\n",
            d = dir.display()
        )
    );
    let paths: Vec<String> = stub.requests().iter().map(|r| r.path.clone()).collect();
    let archive = format!("/releases/v{VERSION}/tinyagent-{VERSION}-{TARGET}.tar.gz");
    assert_eq!(
        paths,
        [
            "/releases/latest".to_string(),
            archive.clone(),
            format!("{archive}.sha256")
        ]
    );
    let version = Command::new(dir.join("tinyagent"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(text(&version.stdout), format!("tinyagent {VERSION}\n"));
    assert_eq!(machine.installed(), ["tinyagent"]);

    // A given version (with or without its `v`), over the installed one,
    // into a directory on PATH; aarch64 on macOS asks for its own archive.
    let out = machine.install(
        &[
            ("TINYAGENT_DOWNLOAD_URL", &base),
            ("TINYAGENT_VERSION", &format!("v{VERSION}")),
        ],
        true,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with(&format!(
        "{} is on your PATH: run tinyagent --help\n",
        dir.display()
    )));
    let mac = Machine::new("Darwin", "arm64");
    let out = mac.install(
        &[
            ("TINYAGENT_DOWNLOAD_URL", &base),
            ("TINYAGENT_VERSION", VERSION),
        ],
        false,
    );
    assert_refused(
        &out,
        &mac,
        &format!("tinyagent-{VERSION}-aarch64-apple-darwin.tar.gz (HTTP 404)"),
    );
}

#[test]
fn a_checksum_mismatch_installs_nothing() {
    let copy = tempfile::tempdir().unwrap();
    let tag = format!("v{VERSION}");
    std::fs::create_dir_all(copy.path().join(&tag)).unwrap();
    for entry in std::fs::read_dir(release().join(&tag)).unwrap().flatten() {
        std::fs::copy(entry.path(), copy.path().join(&tag).join(entry.file_name())).unwrap();
    }
    let sum = copy
        .path()
        .join(&tag)
        .join(format!("tinyagent-{VERSION}-{TARGET}.tar.gz.sha256"));
    std::fs::write(
        &sum,
        format!("{}  tinyagent-{VERSION}-{TARGET}.tar.gz\n", "0".repeat(64)),
    )
    .unwrap();
    let stub = serve(copy.path().to_path_buf());
    let machine = Machine::new("Linux", "amd64");
    let out = machine.install(
        &[
            (
                "TINYAGENT_DOWNLOAD_URL",
                &format!("{}/releases/", stub.url()),
            ),
            ("TINYAGENT_VERSION", VERSION),
        ],
        false,
    );
    assert_refused(
        &out,
        &machine,
        &format!("checksum mismatch for tinyagent-{VERSION}-{TARGET}.tar.gz: expected 0000"),
    );
}

#[test]
fn a_failed_download_names_the_url_and_installs_nothing() {
    let stub = serve(release().to_path_buf());
    let machine = Machine::new("Linux", "x86_64");
    let base = format!("{}/releases", stub.url());
    let out = machine.install(
        &[
            ("TINYAGENT_DOWNLOAD_URL", &base),
            ("TINYAGENT_VERSION", "9.9.9"),
        ],
        false,
    );
    assert_refused(
        &out,
        &machine,
        &format!("download failed: {base}/v9.9.9/tinyagent-9.9.9-{TARGET}.tar.gz (HTTP 404)"),
    );
    // Nothing listening at all.
    drop(stub);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/releases", closed.local_addr().unwrap());
    drop(closed);
    let out = machine.install(&[("TINYAGENT_DOWNLOAD_URL", &url)], false);
    assert_refused(
        &out,
        &machine,
        &format!("download failed: {url}/latest (could not connect)"),
    );
}

#[test]
fn an_unknown_platform_asks_for_nothing_and_installs_nothing() {
    let stub = serve(release().to_path_buf());
    let base = format!("{}/releases", stub.url());
    for (os, arch) in [
        ("SunOS", "x86_64"),
        ("Linux", "riscv64"),
        ("MINGW64_NT-10.0", "x86_64"),
    ] {
        let machine = Machine::new(os, arch);
        let out = machine.install(&[("TINYAGENT_DOWNLOAD_URL", &base)], false);
        assert_refused(
            &out,
            &machine,
            &format!("no release for this platform: {os} {arch}"),
        );
    }
    assert_eq!(stub.count(), 0);
}

/// Nothing publishes tinyagent to crates.io: where there is no release,
/// the script says how to build it that works (`--git`, `--locked`).
#[test]
fn an_unknown_platform_is_told_a_build_command_that_works() {
    let machine = Machine::new("FreeBSD", "amd64");
    let out = machine.install(&[("TINYAGENT_DOWNLOAD_URL", "http://127.0.0.1:9/r")], false);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains(
            "elsewhere build it: cargo install --locked --git https://github.com/tinyagent/tinyagent tinyagent)"
        ),
        "{stderr}"
    );
}

/// Every install command of the README and docs/ci-and-fleets.md (a
/// Dockerfile's `RUN` included), with its continuation lines joined.
fn documented_install_commands() -> Vec<(&'static str, String)> {
    let mut commands = Vec::new();
    for doc in ["README.md", "docs/ci-and-fleets.md"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if !line.contains("raw.githubusercontent.com/") || !line.contains("/install.sh") {
                continue;
            }
            let mut command = line.trim_start_matches("RUN ").to_string();
            while let Some(head) = command.strip_suffix('\\') {
                command = format!("{head} {}", lines.next().unwrap().trim());
            }
            commands.push((doc, command));
        }
    }
    commands
}

/// SPEC 21's failed download exits non-zero; the documented way to run the
/// script must too (`curl … | sh` runs an empty script and exits 0). Each
/// install command of the docs, pointed at a loopback server, fails when
/// the script's download 404s (nothing installed) and installs when it is
/// served.
#[test]
fn the_documented_install_commands_fail_when_the_download_fails() {
    let script = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh")).unwrap();
    let releases = release().to_path_buf();
    let stub = Stub::start(move |_, req| {
        let body = if req.path == "/main/install.sh" {
            Some(script.clone())
        } else {
            req.path
                .strip_prefix("/releases/")
                .map(|p| releases.join(p))
                .filter(|p| !req.path.contains("..") && p.is_file())
                .map(|p| std::fs::read(p).unwrap())
        };
        match body {
            Some(bytes) => Reply {
                status: 200,
                headers: vec![("content-type".into(), "text/plain".into())],
                delay: Duration::ZERO,
                chunks: vec![(Duration::ZERO, bytes)],
                end: End::Complete,
            },
            None => Reply::status(404),
        }
    });
    let commands = documented_install_commands();
    let per_doc = |doc: &str| commands.iter().filter(|(d, _)| *d == doc).count();
    assert_eq!(
        (per_doc("README.md"), per_doc("docs/ci-and-fleets.md")),
        (2, 3),
        "{commands:#?}"
    );
    let documented = "https://raw.githubusercontent.com/tinyagent/tinyagent/main/install.sh";
    for (doc, command) in &commands {
        assert!(command.contains(documented), "{doc}: {command}");
        for (script_url, ok) in [
            (format!("{}/missing/install.sh", stub.url()), false),
            (format!("{}/main/install.sh", stub.url()), true),
        ] {
            let machine = Machine::new("Linux", "x86_64");
            let dir = machine.install_dir();
            let line = command
                .replace(documented, &script_url)
                .replace("0.1.0", VERSION)
                .replace("/tmp/", &format!("{}/", machine.dir.path().display()))
                .replace("/usr/local/bin", dir.to_str().unwrap());
            let out = Command::new("sh")
                .args(["-c", &line])
                .env_clear()
                .env("PATH", machine.path())
                .env("HOME", machine.dir.path().join("home"))
                .env("TINYAGENT_INSTALL_DIR", &dir)
                .env("TINYAGENT_VERSION", VERSION)
                .env("TINYAGENT_DOWNLOAD_URL", format!("{}/releases", stub.url()))
                .current_dir(machine.dir.path())
                .output()
                .unwrap();
            let stderr = text(&out.stderr);
            if ok {
                assert_eq!(out.status.code(), Some(0), "{doc}: {line}: {stderr}");
                assert_eq!(machine.installed(), ["tinyagent"], "{doc}: {line}");
            } else {
                assert_ne!(out.status.code(), Some(0), "{doc}: {line} passed");
                assert!(machine.installed().is_empty(), "{doc}: {line}");
            }
        }
    }
}
