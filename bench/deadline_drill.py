#!/usr/bin/env python3
"""Deadline drill (issue 30, SPEC 4 "Deadlines that fit the request").

A loopback Chat Completions stub takes SLOW x the configured first-event
deadline before it sends anything (headers included) on every request,
then streams a documented-shape reply: a `list_files` tool call until the
last step, then `submit`. tinyagent runs a STEPS-step task against it with
`retry.stream_first_event_timeout: DEADLINE`; the drill counts the
`provider.retry` events with reason `timeout` in its `--json` stream (the
requests that timed out), the requests sent, the exit code and the wall
time.

With a fixed deadline every request would time out (the server always
needs more than the deadline): a run gets through only where a retry's
doubled deadline covers the server, and a model once slow keeps the longer
deadline for its later requests.

Run: python3 bench/deadline_drill.py [--steps 20] [--deadline 1] [--slow 1.5] [--runs 3]
Needs: cargo build --release
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TINYAGENT", os.path.join(ROOT, "target", "release", "tinyagent"))


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "drill",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }) + "\n\n"


def reply(step, steps):
    name, args = ("submit", {"output": "done"}) if step >= steps else ("list_files", {"path": "."})
    call = {"index": 0, "id": f"call_{step}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}
    return "".join([
        chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
        chunk({}, "tool_calls"),
        "data: [DONE]\n\n",
    ])


class Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    steps = 20
    delay = 1.5
    requests = 0

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.requests += 1
        step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        time.sleep(Stub.delay)
        data = reply(step, Stub.steps).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on this request: its deadline ran out


def drill(port, args):
    Stub.requests = 0
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w") as f:
            f.write(
                "providers:\n  drill:\n    api: openai\n"
                f"    endpoint: http://127.0.0.1:{port}/v1\n"
                "health_db: off\n"
                f"retry: {{stream_first_event_timeout: {args.deadline}s, backoff: 10ms, jitter: 0}}\n"
            )
        env = dict(os.environ, HOME=tmp, XDG_STATE_HOME=os.path.join(tmp, "state"),
                   XDG_CONFIG_HOME=os.path.join(tmp, "cfg"))
        start = time.perf_counter()
        out = subprocess.run(
            [BIN, "-m", "drill/m", "-c", config, "--json", "--no-save", "-C", tmp, "list the files"],
            env=env, capture_output=True, text=True, timeout=3600,
        )
        wall = time.perf_counter() - start
    events = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    timeouts = [e for e in events if e.get("type") == "provider.retry" and e.get("reason") == "timeout"]
    return out.returncode, len(timeouts), Stub.requests, wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--deadline", type=float, default=1.0)
    p.add_argument("--slow", type=float, default=1.5)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    Stub.steps = args.steps
    Stub.delay = args.deadline * args.slow
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    results = [drill(port, args) for _ in range(args.runs)]
    for code, timeouts, requests, wall in results:
        print(f"exit {code}  timeouts {timeouts}  requests {requests}  wall {wall:.1f}s")
    print(f"median: timeouts {statistics.median(r[1] for r in results)}, "
          f"requests {statistics.median(r[2] for r in results)}, "
          f"wall {statistics.median(r[3] for r in results):.1f}s "
          f"({args.steps} steps, server needs {Stub.delay:.2f}s against a {args.deadline}s deadline)")
    server.shutdown()
    sys.exit(0 if all(r[0] == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
