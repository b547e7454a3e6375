//! Why a request never reached its server (SPEC 4, reason `network`), in
//! the words the retry line, the error and `--check` use: `could not
//! resolve host <host>`, `connection refused`, `TLS handshake failed`,
//! `connection reset`; so that a mistyped region or endpoint does not read
//! as an outage. Found by walking the error's `source()` chain (reqwest →
//! hyper → the connector's `io::Error`). Also the process's resolver,
//! which names the host that did not resolve and answers a `.invalid`
//! name at once, as RFC 6761 asks of resolvers, without asking DNS.

use std::error::Error;
use std::io::ErrorKind;
use std::net::SocketAddr;

/// A host name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("could not resolve host {host}")]
pub(crate) struct Unresolved {
    host: String,
}

/// The resolver of the process's HTTP client: the system's
/// (`getaddrinfo`, on a blocking thread, as reqwest's own), with its
/// failures said as `Unresolved`.
pub(crate) struct Resolver;

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let unresolved =
                |host: String| -> Box<dyn Error + Send + Sync> { Box::new(Unresolved { host }) };
            if never_resolves(&host) {
                return Err(unresolved(host));
            }
            let looked_up = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map(Iterator::collect::<Vec<SocketAddr>>);
            match looked_up {
                Ok(addrs) => {
                    if addrs.is_empty() {
                        return Err(unresolved(host));
                    }
                    Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
                }
                Err(_) => Err(unresolved(host)),
            }
        })
    }
}

/// A name under `.invalid`, which RFC 6761 reserves never to resolve.
fn never_resolves(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "invalid" || host.ends_with(".invalid")
}

/// What a failed connection says, from its causes; `None` when none of
/// them says more than the error itself. `connecting` is whether the
/// failure came while connecting (reqwest's `is_connect`), where bytes
/// that are not TLS, or none at all, can only be the handshake.
pub(crate) fn cause(error: &(dyn Error + 'static), connecting: bool) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(unresolved) = e.downcast_ref::<Unresolved>() {
            return Some(unresolved.to_string());
        }
        // An `io::Error` may wrap another (the TLS connector's `Other`
        // around rustls' `InvalidData`), which `source()` skips.
        let mut io = e.downcast_ref::<std::io::Error>();
        while let Some(inner) = io {
            if let Some(said) = io_cause(inner, connecting) {
                return Some(said);
            }
            io = inner
                .get_ref()
                .and_then(|e| e.downcast_ref::<std::io::Error>());
        }
        next = e.source();
    }
    None
}

/// An I/O error's words; TLS errors come as `InvalidData` wrapping
/// rustls' own (its first words kept: `invalid peer certificate: ...`).
fn io_cause(io: &std::io::Error, connecting: bool) -> Option<String> {
    match io.kind() {
        ErrorKind::ConnectionRefused => Some("connection refused".into()),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            Some("connection reset".into())
        }
        ErrorKind::InvalidData | ErrorKind::UnexpectedEof if connecting => {
            let detail: String = io
                .get_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
                .chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect();
            Some(if detail.is_empty() {
                "TLS handshake failed".into()
            } else {
                format!("TLS handshake failed ({detail})")
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_never_resolve_and_others_are_asked() {
        assert!(never_resolves("bedrock-runtime.us-east-7.invalid"));
        assert!(never_resolves("x.INVALID."));
        assert!(!never_resolves("invalid.example.com"));
        assert!(!never_resolves("localhost"));
    }

    #[test]
    fn causes_are_found_down_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Box<dyn Error + Send + Sync>);
        let refused = Outer(Box::new(std::io::Error::from(ErrorKind::ConnectionRefused)));
        assert_eq!(cause(&refused, true).as_deref(), Some("connection refused"));
        let reset = Outer(Box::new(std::io::Error::from(ErrorKind::ConnectionReset)));
        assert_eq!(cause(&reset, false).as_deref(), Some("connection reset"));
        let host = Outer(Box::new(Unresolved {
            host: "a.invalid".into(),
        }));
        assert_eq!(
            cause(&host, true).as_deref(),
            Some("could not resolve host a.invalid")
        );
        let tls = Outer(Box::new(std::io::Error::new(
            ErrorKind::InvalidData,
            "received corrupt message of type InvalidContentType",
        )));
        assert_eq!(
            cause(&tls, true).as_deref(),
            Some("TLS handshake failed (received corrupt message of type InvalidContentType)")
        );
        assert_eq!(
            cause(&tls, false),
            None,
            "bad data mid-reply is no handshake"
        );
        // As the TLS connector gives it: `Other` around `InvalidData`.
        let wrapped = Outer(Box::new(std::io::Error::other(std::io::Error::new(
            ErrorKind::InvalidData,
            "received corrupt message of type InvalidContentType",
        ))));
        assert_eq!(
            cause(&wrapped, true).as_deref(),
            Some("TLS handshake failed (received corrupt message of type InvalidContentType)")
        );
    }
}
