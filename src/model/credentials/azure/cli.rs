//! The Azure CLI's own token: `az account get-access-token --scope …
//! --output json`, run with the CLI's configuration directory
//! (`AZURE_CONFIG_DIR`, else `~/.azure`), as azure-identity's
//! `AzureCliCredential` runs it. The CLI is used when `az` is on `PATH` and
//! its profile lists a subscription (it is logged in).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::token::{self, Token};
use crate::model::ModelError;
use crate::setup::Env;

/// How long `az` may take (azure-identity's default).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the Azure CLI cannot give a token: where it was looked for.
#[derive(Debug, thiserror::Error)]
pub(super) enum CliMissing {
    #[error("the Azure CLI (az not found on PATH)")]
    NotOnPath,
    #[error("the Azure CLI (neither AZURE_CONFIG_DIR nor HOME is set)")]
    NoConfigDir,
    #[error("the Azure CLI (not logged in: no subscription in {})", .0.display())]
    NotLoggedIn(PathBuf),
}

/// `az` and its configuration directory, or where it was looked for.
pub(super) fn locate(env: Env) -> Result<(PathBuf, PathBuf), CliMissing> {
    let Some(program) = on_path(env("PATH").as_deref().unwrap_or_default()) else {
        return Err(CliMissing::NotOnPath);
    };
    let config_dir = env("AZURE_CONFIG_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".azure")));
    let Some(config_dir) = config_dir else {
        return Err(CliMissing::NoConfigDir);
    };
    let profile = config_dir.join("azureProfile.json");
    if !logged_in(&profile) {
        return Err(CliMissing::NotLoggedIn(profile));
    }
    Ok((program, config_dir))
}

/// The first executable `az` on `path`.
fn on_path(path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| dir.join("az"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether the CLI's profile lists a subscription (`az login` wrote it;
/// `az logout` empties it). The file may start with a byte-order mark.
fn logged_in(profile: &Path) -> bool {
    let Ok(text) = std::fs::read(profile) else {
        return false;
    };
    let text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&text);
    serde_json::from_slice::<serde_json::Value>(text)
        .ok()
        .and_then(|p| p.get("subscriptions")?.as_array().map(|s| !s.is_empty()))
        .unwrap_or(false)
}

/// A token for `scope` from `az`.
pub(super) async fn token(
    source: &str,
    program: &Path,
    config_dir: &Path,
    scope: &str,
) -> Result<Token, ModelError> {
    let failed = |why: String| ModelError::Network {
        message: format!("the Azure CLI {why} ({source})"),
    };
    let run = tokio::process::Command::new(program)
        .args([
            "account",
            "get-access-token",
            "--output",
            "json",
            "--scope",
            scope,
        ])
        .env("AZURE_CONFIG_DIR", config_dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| failed(format!("did not answer within {} s", TIMEOUT.as_secs())))?
        .map_err(|_| failed("could not be run".into()))?;
    if !output.status.success() {
        // `az`'s own message ("ERROR: Please run 'az login' …"), one line.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line: String = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no message")
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        let why = format!("az account get-access-token failed: {line}");
        return Err(token::refused(source, 401, &why));
    }
    token::parse(&output.stdout).ok_or_else(|| failed("answered without a token".into()))
}

#[cfg(test)]
mod tests {
    use super::logged_in;

    #[test]
    fn a_profile_with_a_subscription_is_logged_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("azureProfile.json");
        assert!(!logged_in(&path));
        std::fs::write(&path, b"\xef\xbb\xbf{\"subscriptions\": [{\"id\": \"s\"}]}").unwrap();
        assert!(logged_in(&path));
        std::fs::write(&path, "{\"subscriptions\": []}").unwrap();
        assert!(!logged_in(&path));
    }
}
