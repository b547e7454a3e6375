#!/usr/bin/env python3
"""`--check` wall time against a three-model chain on loopback stubs.

Each stub is an OpenAI-compatible Chat Completions server that waits a
fixed time before answering with a short streamed tool call (models A, B, C
answer after 40, 80 and 150 ms). The figure is the wall time of
`tinyagent --check` minus the slowest model's own delay: what the check
adds beyond waiting for the models (process start, config, parallel
requests, output). Target: under 100 ms. Medians of N runs.

Run: `cargo build --release && python3 bench/check.py [N]`
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIN = os.environ.get("TINYAGENT_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "target", "release", "tinyagent")
DELAYS = {"a": 0.040, "b": 0.080, "c": 0.150}


def chunk(delta, finish=None):
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1750000000,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def stream():
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "ping", "arguments": "{}"}}
    usage = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1750000000,
             "model": "bench", "choices": [],
             "usage": {"prompt_tokens": 60, "completion_tokens": 8, "total_tokens": 68}}
    return (chunk({"role": "assistant", "content": None, "tool_calls": [call]})
            + chunk({}, "tool_calls")
            + f"data: {json.dumps(usage)}\n\n"
            + "data: [DONE]\n\n").encode()


def server(delay):
    body = stream()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            time.sleep(delay)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    servers = {name: server(d) for name, d in DELAYS.items()}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lines = ["model: a/m", "fallback_models: [b/m, c/m]", "providers:"]
            for name, s in servers.items():
                lines += [f"  {name}:", "    api: openai",
                          f"    endpoint: http://127.0.0.1:{s.server_address[1]}/v1",
                          "    api_key_env: BENCH_KEY"]
            config = os.path.join(tmp, "config.yaml")
            with open(config, "w") as f:
                f.write("\n".join(lines) + "\n")
            env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "BENCH_KEY": "k",
                   "XDG_CONFIG_HOME": os.path.join(tmp, "cfg")}
            walls = []
            for _ in range(runs + 1):
                started = time.perf_counter()
                out = subprocess.run([BIN, "--check", "-c", config], env=env,
                                     capture_output=True, text=True)
                walls.append(time.perf_counter() - started)
                assert out.returncode == 0, out.stdout + out.stderr
                assert out.stdout.count("ok  ") == 3, out.stdout
            walls = walls[1:]  # the first run warms the page cache
            slowest = max(DELAYS.values())
            wall = statistics.median(walls)
            print(f"--check, 3 models (slowest answers after {slowest * 1e3:.0f} ms): "
                  f"median wall {wall * 1e3:.1f} ms, overhead {(wall - slowest) * 1e3:.1f} ms "
                  f"(min {(min(walls) - slowest) * 1e3:.1f}, max {(max(walls) - slowest) * 1e3:.1f}; "
                  f"{runs} runs)")
            print("sample output:\n" + out.stdout.rstrip())
    finally:
        for s in servers.values():
            s.shutdown()


if __name__ == "__main__":
    main()
