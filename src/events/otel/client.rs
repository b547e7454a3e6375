//! The OTLP exporter's HTTP client: reqwest's async client driven by a
//! current-thread runtime on the SDK's batch thread itself. reqwest's
//! blocking client would hand every export to a thread of its own and back,
//! and that handoff, not the request, was most of what an end-of-run flush
//! cost on a busy machine.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

/// Sends OTLP requests from whichever thread calls it (the batch thread),
/// never from inside the run's own runtime.
pub(crate) struct OnCallerThread {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl fmt::Debug for OnCallerThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnCallerThread")
    }
}

impl OnCallerThread {
    /// A client whose every request ends within `timeout`.
    pub(crate) fn new(timeout: Duration) -> Result<OnCallerThread, String> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("tinyagent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(OnCallerThread { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OnCallerThread {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request: reqwest::Request = request.try_into()?;
        self.runtime.block_on(async {
            let mut response = self.client.execute(request).await?.error_for_status()?;
            let headers = std::mem::take(response.headers_mut());
            let mut out = Response::builder()
                .status(response.status())
                .body(response.bytes().await?)?;
            *out.headers_mut() = headers;
            Ok(out)
        })
    }
}
