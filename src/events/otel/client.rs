//! The OTLP exporter's HTTP client: reqwest's async client, awaited on the
//! tracing thread's own current-thread runtime (`batch::Batches` drives
//! it). reqwest's blocking client would hand every export to a thread of
//! its own and back, and that handoff, not the request, was most of what an
//! end-of-run flush cost on a busy machine.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

/// Sends OTLP requests; awaited only inside the tracing thread's runtime,
/// never the run's.
pub(crate) struct OtlpClient {
    client: reqwest::Client,
}

impl fmt::Debug for OtlpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OtlpClient")
    }
}

impl OtlpClient {
    /// A client whose every request ends within `timeout`.
    pub(crate) fn new(timeout: Duration) -> Result<OtlpClient, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("tinyagent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(OtlpClient { client })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request: reqwest::Request = request.try_into()?;
        let mut response = self.client.execute(request).await?.error_for_status()?;
        let headers = std::mem::take(response.headers_mut());
        let mut out = Response::builder()
            .status(response.status())
            .body(response.bytes().await?)?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}
