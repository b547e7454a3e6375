//! The sandbox's only way out: an HTTP proxy on a Unix socket that lets
//! `CONNECT host:port` (HTTPS and other tunnels) and absolute-form `http://`
//! requests through to allowed hosts, and answers 403 to everything else.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::allow::Allowlist;

/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// How long a client has to send its request head, and we to reach upstream.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Headers that concern one hop only and are not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
];

/// A running proxy; stops (and removes its socket) when dropped.
pub(super) struct Proxy {
    dir: tempfile::TempDir,
    socket: PathBuf,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Binds a fresh socket in a private temporary directory and serves it.
    pub(super) fn start(allow: Allowlist) -> io::Result<Proxy> {
        let dir = tempfile::Builder::new()
            .prefix("tinyagent-sandbox-")
            .tempdir()?;
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket)?;
        let task = tokio::spawn(serve(listener, Arc::new(allow)));
        Ok(Proxy { dir, socket, task })
    }

    /// The directory holding the socket (bind-mounted into the sandbox).
    pub(super) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(super) fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: UnixListener, allow: Arc<Allowlist>) {
    while let Ok((conn, _)) = listener.accept().await {
        let allow = allow.clone();
        tokio::spawn(async move {
            let _ = handle(conn, &allow).await;
        });
    }
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    /// Bytes after the head (the start of a body or tunnel data).
    rest: Vec<u8>,
}

async fn read_head(client: &mut UnixStream) -> io::Result<Option<Head>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(HEAD_TIMEOUT, client.read(&mut chunk))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "request head timed out"))??;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                return Ok(Some(Head {
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                    rest: buf[len..].to_vec(),
                }))
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            _ => return Ok(None),
        }
    }
}

async fn handle(mut client: UnixStream, allow: &Allowlist) -> io::Result<()> {
    let Some(head) = read_head(&mut client).await? else {
        return respond(
            &mut client,
            "400 Bad Request",
            "tinyagent sandbox proxy: malformed request",
        )
        .await;
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(&head.target) else {
            return respond(&mut client, "400 Bad Request", "CONNECT needs host:port").await;
        };
        if !allow.allows(&host) {
            return deny(&mut client, &host).await;
        }
        let mut upstream = match connect(&host, port).await {
            Ok(s) => s,
            Err(e) => {
                return respond(
                    &mut client,
                    "502 Bad Gateway",
                    &format!("cannot reach {host}:{port}: {e}"),
                )
                .await
            }
        };
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        upstream.write_all(&head.rest).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }

    let Ok(url) = reqwest::Url::parse(&head.target) else {
        return respond(
            &mut client,
            "400 Bad Request",
            "tinyagent sandbox proxy: expected an absolute http:// URL",
        )
        .await;
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return respond(
            &mut client,
            "400 Bad Request",
            "tinyagent sandbox proxy: the URL has no host",
        )
        .await;
    };
    if url.scheme() != "http" {
        return respond(
            &mut client,
            "400 Bad Request",
            "tinyagent sandbox proxy: only http:// URLs are forwarded; HTTPS goes through CONNECT",
        )
        .await;
    }
    if !allow.allows(host) {
        return deny(&mut client, host).await;
    }
    let mut upstream = match connect(host, port).await {
        Ok(s) => s,
        Err(e) => {
            return respond(
                &mut client,
                "502 Bad Gateway",
                &format!("cannot reach {host}:{port}: {e}"),
            )
            .await
        }
    };
    let mut path = url.path().to_string();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // One request per connection, so every request's host is checked.
    let mut out = format!("{} {path} HTTP/1.1\r\n", head.method).into_bytes();
    for (name, value) in &head.headers {
        if !HOP_BY_HOP.contains(&name.to_ascii_lowercase().as_str()) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    upstream.write_all(&out).await?;
    upstream.write_all(&head.rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// `host:port` (IPv6 in brackets) into its parts.
fn split_authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))?
}

async fn deny(client: &mut UnixStream, host: &str) -> io::Result<()> {
    respond(
        client,
        "403 Forbidden",
        &format!("tinyagent sandbox: {host} is not an allowed domain (see --sandbox-allow-domain)"),
    )
    .await
}

async fn respond(client: &mut UnixStream, status: &str, body: &str) -> io::Result<()> {
    let body = format!("{body}\n");
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(reply.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_with_ipv6() {
        assert_eq!(
            split_authority("crates.io:443"),
            Some(("crates.io".into(), 443))
        );
        assert_eq!(split_authority("[::1]:8080"), Some(("::1".into(), 8080)));
        assert_eq!(split_authority("crates.io"), None);
        assert_eq!(split_authority(":80"), None);
    }
}
