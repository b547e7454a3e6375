//! The HTTP client the AWS credential providers (SSO, STS for assumed roles
//! and web identity, container credentials, EC2 instance metadata) send
//! their requests with: our own reqwest (rustls), so no second TLS stack
//! comes in with `aws-config`. Connections are not pooled: the providers
//! are first asked on the setup's runtime and later on the run's.

use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;

use crate::model::bounds::MAX_EVENT;

/// Builds a connector per the providers' timeouts.
#[derive(Debug, Default)]
pub(super) struct ReqwestHttpClient;

impl HttpClient for ReqwestHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .connect_timeout(
                settings
                    .connect_timeout()
                    .unwrap_or(Duration::from_secs(10)),
            )
            .build()
            .unwrap_or_default();
        SharedHttpConnector::new(Connector {
            client,
            read_timeout: settings.read_timeout(),
        })
    }
}

#[derive(Debug)]
struct Connector {
    client: reqwest::Client,
    read_timeout: Option<Duration>,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let request = request
                .try_into_http1x()
                .map_err(|e| ConnectorError::other(Box::new(e), None))?;
            let (parts, body) = request.into_parts();
            let body = body.bytes().map(<[u8]>::to_vec).unwrap_or_default();
            let mut builder = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            if let Some(limit) = read_timeout {
                builder = builder.timeout(limit);
            }
            let response = builder.send().await.map_err(connector_error)?;
            let status = response.status();
            let headers = response.headers().clone();
            let bytes = response.bytes().await.map_err(connector_error)?;
            if bytes.len() > MAX_EVENT {
                return Err(ConnectorError::other(
                    "a credentials response too large".into(),
                    None,
                ));
            }
            let mut out = http::Response::new(SdkBody::from(bytes));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            HttpResponse::try_from(out).map_err(|e| ConnectorError::other(Box::new(e), None))
        })
    }
}

fn connector_error(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        ConnectorError::timeout(Box::new(e))
    } else {
        ConnectorError::io(Box::new(e))
    }
}
