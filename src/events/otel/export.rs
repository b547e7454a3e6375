//! The OTLP/HTTP side of tracing: the variables that turn it on, the
//! exporter (driven by the tracing thread itself, on a runtime of its own,
//! so the run's current-thread runtime never waits on a collector), the
//! resource, and failure notes.

use std::fmt;
use std::time::Duration;

use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::resource::{
    EnvResourceDetector, ResourceDetector, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;

use super::batch::{BatchLimits, Batches, Gathered};

/// How long one export may take when no `OTEL_EXPORTER_OTLP_*TIMEOUT` says
/// otherwise: the whole end-of-run flush is bounded by the same figure.
pub(crate) const FLUSH_BUDGET: Duration = Duration::from_secs(2);

/// Tracing as the environment asks for it.
#[derive(Clone)]
pub(crate) struct OtelConfig {
    /// `scheme://host:port` of the collector, for messages (never a path,
    /// query or credentials).
    pub endpoint: String,
    pub protocol: Protocol,
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
    pub capture_content: bool,
    /// `TRACEPARENT` / `TRACESTATE` of the process that started tinyagent.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// `OTEL_SERVICE_NAME`.
    service_name: Option<String>,
    /// Notes to show as `warning` events when the run starts.
    pub warnings: Vec<String>,
    /// Why tracing cannot start (an endpoint that is not an http(s) URL).
    invalid: Option<String>,
    /// How spans are batched (`OTEL_BSP_*`).
    batch: BatchLimits,
    /// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`,
    /// else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else `FLUSH_BUDGET`.
    timeout: Duration,
}

impl fmt::Debug for OtelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelConfig")
            .field("endpoint", &self.endpoint)
            .field("capture_content", &self.capture_content)
            .finish_non_exhaustive()
    }
}

impl OtelConfig {
    /// Tracing settings when an OTLP endpoint is set, else `None` (and
    /// nothing of OpenTelemetry is touched).
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Option<OtelConfig> {
        let var = |name: &str| {
            env(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let (name, endpoint) = match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url),
            None => (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                var("OTEL_EXPORTER_OTLP_ENDPOINT")?,
            ),
        };
        // The SDK would quietly send to localhost instead of a bad URL.
        let invalid = match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => None,
            _ => Some(format!(
                "tracing is off: {name} is not an http:// or https:// URL"
            )),
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return None;
        }
        let mut warnings = Vec::new();
        let protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("http/protobuf") => Protocol::HttpBinary,
            Some("http/json") => Protocol::HttpJson,
            Some(other) => {
                warnings.push(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={} is not supported: traces are sent as http/protobuf",
                    bounded(other, 40)
                ));
                Protocol::HttpBinary
            }
        };
        Some(OtelConfig {
            endpoint: origin(&endpoint),
            protocol,
            capture_content: var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            traceparent: var("TRACEPARENT"),
            tracestate: var("TRACESTATE"),
            service_name: var("OTEL_SERVICE_NAME"),
            warnings,
            invalid,
            batch: BatchLimits::from_env(&var),
            timeout: [
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ]
            .into_iter()
            .find_map(|name| var(name)?.trim().parse::<u64>().ok())
            .map_or(FLUSH_BUDGET, Duration::from_millis),
        })
    }
}

impl OtelConfig {
    /// Why tracing cannot start, if it cannot (an endpoint that is not an
    /// http(s) URL).
    pub(crate) fn invalid(&self) -> Option<&str> {
        self.invalid.as_deref()
    }
}

/// `scheme://host:port` of a URL, or a placeholder when it does not parse.
fn origin(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}", u.scheme()),
            (Some(host), None) => format!("{}://{host}", u.scheme()),
            _ => "the OTLP endpoint".to_string(),
        },
        Err(_) => "the OTLP endpoint".to_string(),
    }
}

fn bounded(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Why tracing is off for this run (said once, as its warning).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TracingOff {
    /// An OTLP variable that cannot be used, said as `OtelConfig` put it.
    #[error("{0}")]
    Invalid(String),
    #[error("tracing is off: the OTLP client could not be set up: {0}")]
    Client(String),
    #[error("tracing is off: the OTLP exporter could not be set up: {0}")]
    Exporter(String),
}

/// Starts the tracer provider and the batches its spans gather in for the
/// OTLP/HTTP exporter (endpoint and headers from the standard variables,
/// read by the SDK's exporter builder).
pub(crate) fn start(config: &OtelConfig) -> Result<(SdkTracerProvider, Batches), TracingOff> {
    if let Some(invalid) = &config.invalid {
        return Err(TracingOff::Invalid(invalid.clone()));
    }
    let client = super::client::OtlpClient::new(config.timeout)
        .map_err(|e| TracingOff::Client(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TracingOff::Client(e.to_string()))?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(config.protocol)
        .with_http_client(client)
        .build()
        .map_err(|e| TracingOff::Exporter(e.to_string()))?;
    let resource = resource(config.service_name.clone());
    exporter.set_resource(&resource);
    let gathered = Gathered::new(config.batch);
    // Sampling follows `TRACEPARENT`'s flag, else every run is sampled: the
    // sink has already told commands so.
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .with_span_processor(gathered.clone())
        .with_resource(resource)
        .build();
    Ok((
        provider,
        Batches::new(exporter, runtime, gathered, config.batch),
    ))
}

/// `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own attributes, and `service.name`
/// from `OTEL_SERVICE_NAME`, else from the resource attributes, else
/// `tinyagent`.
fn resource(service_name: Option<String>) -> Resource {
    let from_env = EnvResourceDetector::new().detect();
    let service_key = Key::from_static_str("service.name");
    let service = service_name
        .or_else(|| from_env.get(&service_key).map(|v| v.to_string()))
        .unwrap_or_else(|| "tinyagent".to_string());
    let mut builder = Resource::builder_empty()
        .with_detectors(&[Box::new(TelemetryResourceDetector)])
        .with_attributes(
            from_env
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
    if from_env
        .get(&Key::from_static_str("service.version"))
        .is_none()
    {
        builder =
            builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    builder.with_service_name(service).build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Option<OtelConfig> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtelConfig::from_env(&move |name| map.get(name).cloned())
    }

    #[test]
    fn off_without_an_endpoint_or_when_disabled() {
        assert!(config(&[]).is_none());
        assert!(config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).is_none());
        assert!(config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true")
        ])
        .is_none());
        assert!(config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none")
        ])
        .is_none());
    }

    #[test]
    fn protocol_defaults_to_protobuf_and_json_is_chosen_by_name() {
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        assert_eq!(c.protocol, Protocol::HttpBinary);
        assert!(c.warnings.is_empty());
        let c = config(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap();
        assert_eq!(c.protocol, Protocol::HttpJson);
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap();
        assert_eq!(c.protocol, Protocol::HttpBinary);
        assert!(c.warnings[0].contains("grpc is not supported"));
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_turns_tracing_off_with_a_reason() {
        for bad in ["localhost:4318", "ftp://c/x", "not a url"] {
            let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", bad)]).unwrap();
            let Err(err) = start(&c) else {
                panic!("{bad} accepted")
            };
            let err = err.to_string();
            assert_eq!(
                err,
                "tracing is off: OTEL_EXPORTER_OTLP_ENDPOINT is not an http:// or https:// URL"
            );
        }
    }

    #[test]
    fn the_endpoint_in_messages_has_no_credentials_or_path() {
        let c = config(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://user:s3cret@collector.example/otlp?key=abc",
        )])
        .unwrap();
        assert_eq!(c.endpoint, "https://collector.example:443");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
