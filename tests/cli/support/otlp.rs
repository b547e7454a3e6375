//! A loopback OTLP/HTTP receiver: the stub server answering 200 to every
//! POST, and the exported spans decoded from protobuf or JSON with the
//! `opentelemetry-proto` types, flattened for assertions.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use serde_json::{json, Value};

use super::stub::{Captured, Reply, Stub};

/// One exported span, flattened.
#[derive(Debug, Clone)]
pub struct FlatSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// 1 internal, 3 client (the OTLP enum).
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: BTreeMap<String, Value>,
    /// (name, attributes)
    pub events: Vec<(String, BTreeMap<String, Value>)>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// The resource the span came with.
    pub resource: BTreeMap<String, Value>,
}

impl FlatSpan {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

/// The receiver.
pub struct Collector {
    pub stub: Stub,
}

impl Collector {
    pub fn start() -> Collector {
        Collector {
            stub: Stub::start(|_, _| Reply::json(200, &json!({}))),
        }
    }

    /// `http://127.0.0.1:<port>`, the value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn url(&self) -> String {
        self.stub.url()
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.stub.requests()
    }

    /// Every span received, in arrival order, decoded by content type.
    pub fn spans(&self) -> Vec<FlatSpan> {
        self.requests().iter().flat_map(decode).collect()
    }
}

/// The spans of one export request.
pub fn decode(request: &Captured) -> Vec<FlatSpan> {
    let content_type = request.header("content-type").unwrap_or_default();
    let export: ExportTraceServiceRequest = if content_type == "application/json" {
        serde_json::from_slice(&request.body).expect("OTLP JSON body")
    } else {
        assert_eq!(content_type, "application/x-protobuf");
        ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf body")
    };
    let mut spans = Vec::new();
    for resource_spans in export.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(FlatSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    status_code: span.status.map(|s| s.code).unwrap_or(0),
                    resource: resource.clone(),
                });
            }
        }
    }
    spans
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn value(v: &AnyValue) -> Value {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(value).collect()),
        Some(any_value::Value::KvlistValue(l)) => {
            Value::Object(attributes(&l.values).into_iter().collect())
        }
        Some(any_value::Value::BytesValue(b)) => json!(hex(b)),
        None => Value::Null,
    }
}
