#!/usr/bin/env python3
"""Agent overhead per step over HTTP, for the Anthropic and Responses adapters.

A loopback stub answers each streaming request with a documented-shape SSE
reply: a `list_files` tool call until step N, then `submit`. The step is read
from the request (the number of assistant turns so far), so the stub is
stateless and each run is identical. tinyagent (release build) runs the whole
task; overhead per step = (wall time of an N-step run - wall time of a 1-step
run) / (N - 1) - the stub's own time per request (measured in the handler).

Usage: bench/providers-steps.py [--steps 200] [--runs 5]
Needs: cargo build --release
"""

import argparse
import json
import socket
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "tinyagent")


def sse(data):
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


def anthropic_reply(step, steps):
    name, args = ("submit", {"output": "done"}) if step >= steps else ("list_files", {"path": "."})
    return "".join([
        sse({"type": "message_start", "message": {"id": f"msg_{step}", "type": "message", "role": "assistant", "content": [],
             "model": "claude-sonnet-4-5", "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"Step {step}."}}),
        sse({"type": "content_block_stop", "index": 0}),
        sse({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": f"toolu_{step}", "name": name, "input": {}}}),
        sse({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}}),
        sse({"type": "content_block_stop", "index": 1}),
        sse({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 20}}),
        sse({"type": "message_stop"}),
    ])


def responses_reply(step, steps):
    name, args = ("submit", {"output": "done"}) if step >= steps else ("list_files", {"path": "."})
    item = {"type": "function_call", "id": f"fc_{step}", "call_id": f"call_{step}", "name": name, "arguments": json.dumps(args), "status": "completed"}
    return "".join([
        sse({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "object": "response", "status": "in_progress"}}),
        sse({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": dict(item, arguments="", status="in_progress")}),
        sse({"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": item["id"], "output_index": 0, "delta": item["arguments"]}),
        sse({"type": "response.function_call_arguments.done", "sequence_number": 3, "item_id": item["id"], "output_index": 0, "arguments": item["arguments"]}),
        sse({"type": "response.output_item.done", "sequence_number": 4, "output_index": 0, "item": item}),
        sse({"type": "response.completed", "sequence_number": 5, "response": {"id": "resp_1", "object": "response", "status": "completed",
             "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20, "total_tokens": 120}}}),
    ])


class Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    steps = 1
    busy = []

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Without this, Nagle's algorithm and delayed ACKs add ~40 ms per reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        start = time.perf_counter()
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path.endswith("/v1/messages"):
            step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
            reply = anthropic_reply(step, Stub.steps)
        else:
            step = 1 + sum(1 for i in body["input"] if i.get("type") == "function_call")
            reply = responses_reply(step, Stub.steps)
        data = reply.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        Stub.busy.append(time.perf_counter() - start)


def run(api, url, steps, work):
    Stub.steps = steps
    env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=os.path.join(work, "cfg"), XDG_STATE_HOME=os.path.join(work, "state"),
               ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="k", OPENAI_BASE_URL=url + "/v1", OPENAI_API_KEY="k")
    model = "anthropic/claude-sonnet-4-5" if api == "anthropic" else "responses/gpt-5"
    start = time.perf_counter()
    out = subprocess.run([BIN, "-m", model, "-q", "--step-limit", str(steps + 5), "bench"], cwd=work, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{api}: exit {out.returncode}: {out.stderr.decode()[-500:]}")
    return elapsed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "cfg", "tinyagent"))
        with open(os.path.join(work, "cfg", "tinyagent", "config.yaml"), "w") as f:
            f.write("health_db: off\n")
        for api in ["anthropic", "responses"]:
            per_step = []
            for _ in range(a.runs):
                one = run(api, url, 1, work)
                Stub.busy.clear()
                many = run(api, url, a.steps, work)
                stub = statistics.mean(Stub.busy)
                per_step.append(((many - one) / (a.steps - 1) - stub) * 1000)
            print(f"{api}: {a.steps}-step run, agent overhead per step {statistics.median(per_step):.2f} ms "
                  f"(median of {a.runs}; stub time {stub * 1000:.2f} ms/request subtracted)")


if __name__ == "__main__":
    main()
