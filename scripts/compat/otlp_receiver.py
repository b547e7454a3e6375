#!/usr/bin/env python3
"""Compatibility suite: an OTLP/HTTP trace receiver that decodes with the
OpenTelemetry project's own Python bindings (`opentelemetry-proto`), not
with tinyagent's Rust crates, and checks a run's trace (SPEC 16).

  otlp_receiver.py serve PORT OUT.jsonl    # receive until killed
  otlp_receiver.py check OUT.jsonl PROVIDER MODEL SERVER_PORT RUN.jsonl

`serve` answers every POST to /v1/traces: protobuf is parsed as an
ExportTraceServiceRequest, OTLP/JSON with protobuf's strict JSON parser
(unknown field names are errors) after turning the hex trace and span ids
into bytes, as the OTLP specification's JSON encoding says. Each decoded
span is one line of OUT.jsonl. `check` prints `PASS <details>` or
`FAIL <why>` for the run whose `--json` events are in RUN.jsonl.
"""
import base64
import http.server
import json
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON ids are hex; protobuf's JSON mapping wants base64 bytes."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_ids_to_base64(item)


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def flat(request, encoding):
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "encoding": encoding,
                    "service": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                    "name": span.name,
                    "kind": span.kind,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "status": span.status.code,
                    "attributes": {a.key: value_of(a.value) for a in span.attributes},
                    "events": [e.name for e in span.events],
                }


def serve(port, out_path):
    out = open(out_path, "a", buffering=1)

    class Receiver(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            request = trace_service_pb2.ExportTraceServiceRequest()
            try:
                if self.path != "/v1/traces":
                    raise ValueError(f"path {self.path}")
                if self.headers.get("content-type", "").startswith("application/json"):
                    doc = json.loads(body)
                    hex_ids_to_base64(doc)
                    json_format.ParseDict(doc, request)
                    encoding = "json"
                else:
                    request.ParseFromString(body)
                    encoding = "protobuf"
            except Exception as e:  # the check reports it
                out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
                self.send_response(400)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            for span in flat(request, encoding):
                out.write(json.dumps(span) + "\n")
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Receiver).serve_forever()


def check(spans_path, provider, model, server_port, run_path):
    lines = [json.loads(l) for l in open(spans_path) if l.strip()]
    errors = [l["error"] for l in lines if "error" in l]
    if errors:
        return f"FAIL the receiver could not decode an export: {errors[0]}"
    events = [json.loads(l) for l in open(run_path) if l.strip()]
    started = next((e for e in events if e.get("type") == "run.started"), None)
    if started is None:
        return "FAIL no run.started event"
    run_id = started["run_id"]
    runs = [s for s in lines if s["name"] == "invoke_agent tinyagent"
            and s["attributes"].get("tinyagent.run_id") == run_id]
    if len(runs) != 1:
        return f"FAIL {len(runs)} run spans for run {run_id}"
    run = runs[0]
    trace = [s for s in lines if s["trace_id"] == run["trace_id"]]
    chats = [s for s in trace if s["name"] == f"chat {provider}/{model}"]
    tools = [s for s in trace if s["name"].startswith("execute_tool ")]
    requests = [e for e in events if e.get("type") == "model.response"]
    if len(chats) < len(requests) or not chats:
        return f"FAIL {len(chats)} chat spans for {len(requests)} model responses"
    calls = [e for e in events if e.get("type") == "tool.started"]
    if len(tools) != len(calls):
        return f"FAIL {len(tools)} tool spans for {len(calls)} tool calls"
    ids = {s["span_id"] for s in trace}
    for span in chats + tools:
        if span["parent_span_id"] not in ids:
            return f"FAIL {span['name']} has a parent outside the trace"
        if span["end"] < span["start"]:
            return f"FAIL {span['name']} ends before it starts"
    for chat in chats:
        a = chat["attributes"]
        want = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                "gen_ai.request.model": model, "server.address": "127.0.0.1",
                "server.port": int(server_port)}
        wrong = {k: a.get(k) for k, v in want.items() if a.get(k) != v}
        if wrong:
            return f"FAIL chat span attributes {wrong}"
        if a.get("error.type") is None and (a.get("gen_ai.usage.input_tokens", 0) <= 0
                                            or not a.get("gen_ai.response.model")):
            return f"FAIL a successful chat span without tokens or response model: {a}"
    finished = next(e for e in events if e.get("type") == "run.finished")
    if run["attributes"].get("tinyagent.status") != finished["status"]:
        return f"FAIL run span status {run['attributes'].get('tinyagent.status')}"
    if run["service"] != "tinyagent" or run["scope"] != "tinyagent":
        return f"FAIL service {run['service']!r}, scope {run['scope']!r}"
    encodings = sorted({s["encoding"] for s in trace})
    answered = sorted({c["attributes"]["gen_ai.response.model"] for c in chats
                       if "gen_ai.response.model" in c["attributes"]})
    return (f"PASS {len(trace)} spans ({len(chats)} chat, {len(tools)} tool) via "
            f"{'+'.join(encodings)}, response model {','.join(answered)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(*sys.argv[2:4])
    elif sys.argv[1:2] == ["check"]:
        print(check(*sys.argv[2:7]))
    else:
        sys.exit(__doc__)
