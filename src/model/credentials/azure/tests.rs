use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{find, Credentials, FindError, COGNITIVE_SERVICES_SCOPE as SCOPE};

/// An environment of these variables; the instance metadata service and
/// the CLI are made unreachable unless given.
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let mut vars: Vec<(String, String)> = vec![
        (
            "AZURE_POD_IDENTITY_AUTHORITY_HOST".into(),
            "http://127.0.0.1:9".into(),
        ),
        ("PATH".into(), "/nonexistent".into()),
        ("AZURE_CONFIG_DIR".into(), "/nonexistent/azure".into()),
    ];
    for (k, v) in pairs {
        vars.retain(|(n, _)| n != k);
        vars.push((k.to_string(), v.to_string()));
    }
    move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

#[test]
fn the_order_is_the_secret_the_certificate_the_workload_then_app_service() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "eyJhbGciOi.federated.sig\n").unwrap();
    let token_file = token_file.to_str().unwrap();
    let all = [
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "client-1"),
        ("AZURE_CLIENT_SECRET", "s3cret-value"),
        ("AZURE_FEDERATED_TOKEN_FILE", token_file),
        ("IDENTITY_ENDPOINT", "http://127.0.0.1:9/msi/token"),
        ("IDENTITY_HEADER", "header-s3cret"),
    ];
    let c = find(&env_of(&all), SCOPE).unwrap();
    assert_eq!(c.source(), "Entra ID, service principal (AZURE_CLIENT_ID)");
    assert_eq!(c.identity(), "azure:tenant-1/client-1");
    let c = find(
        &env_of(
            &all[..2]
                .iter()
                .chain(&all[3..])
                .copied()
                .collect::<Vec<_>>(),
        ),
        SCOPE,
    )
    .unwrap();
    assert_eq!(
        c.source(),
        "Entra ID, workload identity (AZURE_FEDERATED_TOKEN_FILE)"
    );
    let c = find(&env_of(&all[4..]), SCOPE).unwrap();
    assert_eq!(c.source(), "Entra ID, managed identity (IDENTITY_ENDPOINT)");
    assert_eq!(c.identity(), "azure:managed-identity:system");
    let shown = format!("{c:?} {}", c.identity());
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn nothing_found_names_every_place_and_no_value() {
    let e = find(&env_of(&[("AZURE_CLIENT_ID", "client-1")]), SCOPE).unwrap_err();
    let text = e.to_string();
    for place in [
        "a service principal (AZURE_TENANT_ID, AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH not set)",
        "workload identity (AZURE_FEDERATED_TOKEN_FILE, AZURE_TENANT_ID not set)",
        "a managed identity (IDENTITY_ENDPOINT, IDENTITY_HEADER not set)",
        "the instance metadata service (http://127.0.0.1:9: no answer within 2 s)",
        "the Azure CLI (az not found on PATH)",
    ] {
        assert!(text.contains(place), "{place}: {text}");
    }
    assert!(!text.contains("client-1"), "{text}");
    assert!(matches!(e, FindError::NotFound(_)));
}

#[test]
fn a_set_but_unusable_source_is_named_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let e = find(
        &env_of(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_CLIENT_CERTIFICATE_PATH", missing),
        ]),
        SCOPE,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("AZURE_CLIENT_CERTIFICATE_PATH ({missing}): cannot be read")
    );
    let e = find(
        &env_of(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_FEDERATED_TOKEN_FILE", missing),
        ]),
        SCOPE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cannot be read or is empty"), "{e}");
    let e = find(
        &env_of(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_CLIENT_SECRET", "s"),
            ("AZURE_AUTHORITY_HOST", "http://login.example.com"),
        ]),
        SCOPE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("AZURE_AUTHORITY_HOST"), "{e}");
}

/// A loopback token endpoint answering each request after `delay` with a
/// token lasting `expires_in`; counts the requests.
async fn token_endpoint(expires_in: u64, delay_ms: u64) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = socket.read(&mut buf).await;
                tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                let body = format!(
                    r#"{{"token_type":"Bearer","expires_in":{expires_in},"access_token":"tok-{n}"}}"#
                );
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, count)
}

fn request() -> reqwest::Request {
    reqwest::Client::new()
        .post("http://127.0.0.1:9/x")
        .build()
        .unwrap()
}

#[tokio::test]
async fn one_token_for_every_request_in_flight_then_a_fresh_one_once_dropped() {
    let (url, count) = token_endpoint(3600, 200).await;
    let env = env_of(&[
        ("AZURE_TENANT_ID", "t"),
        ("AZURE_CLIENT_ID", "c"),
        ("AZURE_CLIENT_SECRET", "s3cret"),
        ("AZURE_AUTHORITY_HOST", &url),
    ]);
    let c = Arc::new(find(&env, SCOPE).unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut r = request();
                c.authorize(&mut r).await.unwrap();
                r.headers()["authorization"].to_str().unwrap().to_string()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), "Bearer tok-1");
    }
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(c.invalidate());
    let mut r = request();
    c.authorize(&mut r).await.unwrap();
    assert_eq!(r.headers()["authorization"], "Bearer tok-2");
    assert!(r.headers()["authorization"].is_sensitive());
}

#[tokio::test]
async fn a_short_lived_token_is_fetched_again_and_an_unreachable_endpoint_is_network() {
    let (url, count) = token_endpoint(1, 0).await;
    let env = env_of(&[
        ("AZURE_TENANT_ID", "t"),
        ("AZURE_CLIENT_ID", "c"),
        ("AZURE_CLIENT_SECRET", "s"),
        ("AZURE_AUTHORITY_HOST", &url),
    ]);
    let c = find(&env, SCOPE).unwrap();
    c.authorize(&mut request()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    c.authorize(&mut request()).await.unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 2);

    let env = env_of(&[
        ("AZURE_TENANT_ID", "t"),
        ("AZURE_CLIENT_ID", "c"),
        ("AZURE_CLIENT_SECRET", "s"),
        ("AZURE_AUTHORITY_HOST", "http://127.0.0.1:9"),
    ]);
    let e = find(&env, SCOPE)
        .unwrap()
        .authorize(&mut request())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, crate::model::ModelError::Network { message } if message.contains("could not be reached")),
        "{e:?}"
    );
}
