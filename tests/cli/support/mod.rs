//! Test support: a `TestEnv` with a temp home and working directory, script
//! model helpers, JSONL parsing, and a loopback stub server (`stub`).

#![allow(dead_code)]

pub mod anthropic;
pub mod fake_cloud;
pub mod ollama;
pub mod openai;
pub mod otlp;
pub mod redis;
pub mod responses;
pub mod stub;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// Environment variables that must never leak from the developer's shell.
const SCRUBBED: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
    "TINYAGENT_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "NO_COLOR",
    "TINYAGENT_REDIS_PASSWORD",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "TRACEPARENT",
    "TRACESTATE",
    // Clouds (SPEC 22): no test reads the developer's own cloud set-up.
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "CLOUD_ML_REGION",
    "VERTEX_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_BASE_URL",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_AD_TOKEN",
    "AZURE_OPENAI_API_VERSION",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
];

/// Cloud variables every test sets, so that nothing can reach a metadata
/// address or read the developer's cloud files: instance metadata off, the
/// Google metadata server and Azure's instance metadata service on a dead
/// loopback port, the AWS, gcloud and Azure CLI files
/// inside the test's own home. A test that needs a source sets its own.
fn cloud_isolation(home: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("AWS_CONFIG_FILE", home.join(".aws/config")),
        ("AWS_SHARED_CREDENTIALS_FILE", home.join(".aws/credentials")),
        ("CLOUDSDK_CONFIG", home.join(".config/gcloud")),
        ("AZURE_CONFIG_DIR", home.join(".azure")),
        // Azure's instance metadata service: a dead loopback port.
        (
            "AZURE_POD_IDENTITY_AUTHORITY_HOST",
            PathBuf::from("http://127.0.0.1:9"),
        ),
    ]
}

/// A loopback port nothing listens on (the discard port): the Google
/// metadata server of every test unless it starts a fake one.
pub const DEAD_METADATA_HOST: &str = "127.0.0.1:9";

/// A sandboxed place to run the binary: `home/` (config and state live
/// there), `work/` (the working directory) and `files/` (scripts, outputs).
pub struct TestEnv {
    pub dir: TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["home", "work", "files"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        TestEnv { dir }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// A path under `files/`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join("files").join(name)
    }

    /// Writes `files/<name>` and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.file(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes a script model and returns its spec, `script/<abs path>`.
    pub fn script(&self, name: &str, yaml: &str) -> String {
        format!("script/{}", self.write(name, yaml).display())
    }

    /// Writes the user config (`$XDG_CONFIG_HOME/tinyagent/config.yaml`).
    pub fn user_config(&self, yaml: &str) -> PathBuf {
        let path = self.home().join(".config/tinyagent/config.yaml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, yaml).unwrap();
        path
    }

    /// The binary with a clean environment: HOME and XDG dirs in the temp
    /// dir, no API keys, working directory `work/`, stdin empty.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::cargo_bin("tinyagent").expect("binary");
        for var in SCRUBBED {
            cmd.env_remove(var);
        }
        for (var, path) in cloud_isolation(&self.home()) {
            cmd.env(var, path);
        }
        cmd.env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("XDG_STATE_HOME", self.home().join(".local/state"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("GCE_METADATA_HOST", DEAD_METADATA_HOST)
            .env("GCE_METADATA_IP", DEAD_METADATA_HOST)
            .current_dir(self.work())
            .write_stdin("");
        cmd
    }

    /// A std command for the same binary and environment (for spawning),
    /// stdin empty unless the caller sets it (a piped stdin is read).
    pub fn std_cmd(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("tinyagent"));
        cmd.stdin(std::process::Stdio::null());
        for var in SCRUBBED {
            cmd.env_remove(var);
        }
        for (var, path) in cloud_isolation(&self.home()) {
            cmd.env(var, path);
        }
        cmd.env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("XDG_STATE_HOME", self.home().join(".local/state"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("GCE_METADATA_HOST", DEAD_METADATA_HOST)
            .env("GCE_METADATA_IP", DEAD_METADATA_HOST)
            .current_dir(self.work());
        cmd
    }
}

/// Parses JSONL stdout, checking every line is a JSON object.
pub fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
            assert!(v.is_object(), "not an object: {line}");
            v
        })
        .collect()
}

/// The events of one type.
pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The last event, which must be `run.finished`.
pub fn finished(events: &[Value]) -> &Value {
    let last = events.last().expect("no events");
    assert_eq!(last["type"], "run.finished", "last event: {last}");
    last
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `reason` of every `provider.retry` event, in order.
pub fn retry_reasons(events: &[Value]) -> Vec<String> {
    of_type(events, "provider.retry")
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Asserts that `secret` appears in neither stdout, stderr nor any of
/// `files` (each of which must exist, so the check cannot pass vacuously).
pub fn assert_secret_absent(secret: &str, out: &std::process::Output, files: &[&Path]) {
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(secret),
        "secret in stdout"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains(secret),
        "secret in stderr"
    );
    for f in files {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "secret in {}",
            f.display()
        );
    }
}
