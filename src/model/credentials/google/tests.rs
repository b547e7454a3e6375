//! Unit tests of Google credentials.

use super::*;

/// An environment of these variables (owned, unlike `fixed_env`).
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tinyagent-google-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_order_is_the_variable_then_gclouds_file_then_the_metadata_server() {
    let d = dir();
    let file = d.join("user.json");
    std::fs::write(
        &file,
        r#"{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","quota_project_id":"qp"}"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let c = find(&env_of(&[("GOOGLE_APPLICATION_CREDENTIALS", path)])).unwrap();
    assert_eq!(kind_name(&c), "authorized_user");
    assert_eq!(c.project(), Some("qp"));
    assert!(c.source().contains("GOOGLE_APPLICATION_CREDENTIALS"));

    let gcloud = d.join("gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::copy(&file, gcloud.join("application_default_credentials.json")).unwrap();
    let c = find(&env_of(&[("CLOUDSDK_CONFIG", gcloud.to_str().unwrap())])).unwrap();
    assert!(c
        .source()
        .starts_with("gcloud application default credentials"));

    let c = find(&env_of(&[
        ("CLOUDSDK_CONFIG", d.to_str().unwrap()),
        ("GCE_METADATA_HOST", "127.0.0.1:9"),
    ]))
    .unwrap();
    assert_eq!(c.metadata_host(), Some("127.0.0.1:9"));
    assert_eq!(c.source(), "the metadata server (127.0.0.1:9)");
}

#[test]
fn a_token_endpoints_reason_is_kept_short_and_on_one_line() {
    assert_eq!(
        refusal_reason(
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#
        )
        .as_deref(),
        Some("invalid_grant: Invalid JWT Signature.")
    );
    assert_eq!(
        refusal_reason(br#"{"error":"invalid_grant"}"#).as_deref(),
        Some("invalid_grant")
    );
    assert_eq!(
        refusal_reason(
            br#"{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}"#
        )
        .as_deref(),
        Some("PERMISSION_DENIED: Permission denied")
    );
    let long = format!(
        r#"{{"error":"x","error_description":"line\nbreak {}"}}"#,
        "y".repeat(1000)
    );
    let reason = refusal_reason(long.as_bytes()).unwrap();
    assert!(reason.chars().count() <= MAX_REASON_CHARS && !reason.contains('\n'));
    assert_eq!(refusal_reason(b"<html>"), None);
}

#[test]
fn nothing_found_names_every_place_and_a_bad_file_names_itself() {
    let d = dir();
    let e = find(&env_of(&[("CLOUDSDK_CONFIG", d.to_str().unwrap())])).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("GOOGLE_APPLICATION_CREDENTIALS (not set)"),
        "{text}"
    );
    assert!(
        text.contains("application_default_credentials.json (not found)"),
        "{text}"
    );
    assert!(text.contains("the metadata server"), "{text}");

    let file = d.join("bad.json");
    std::fs::write(&file, "not json {").unwrap();
    let e = find(&env_of(&[(
        "GOOGLE_APPLICATION_CREDENTIALS",
        file.to_str().unwrap(),
    )]))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("bad.json: not a Google credentials file"),
        "{e}"
    );
    std::fs::write(
        &file,
        r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"}"#,
    )
    .unwrap();
    let e = find(&env_of(&[(
        "GOOGLE_APPLICATION_CREDENTIALS",
        file.to_str().unwrap(),
    )]))
    .unwrap_err();
    assert!(e.to_string().contains("not an RSA key"), "{e}");
    assert!(!e.to_string().contains("nope"));
}
