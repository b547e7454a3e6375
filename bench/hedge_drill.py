#!/usr/bin/env python3
"""Hedge drill (issue 36, SPEC 23 "Hedged first events").

Two loopback Chat Completions stubs: a primary whose first event is slow
on a heavy tail (one request in five, drawn from a seeded generator, sends
its headers and then nothing for STALL seconds; the others answer after
0.2 s) and a fallback that answers every request after 0.3 s. tinyagent
runs a 3-step task (two `list_files` calls, then `submit`) RUNS times with
`-m primary/m --fallback-model fallback/m`, once with `--hedge-after
HEDGE` and once without hedging, the same stalls in both. The drill
reports each mode's median and p95 run wall, the requests both stubs got,
and the hedges sent (`model.hedge` events).

`--silent N` adds N runs against a primary that never sends a first event
(hedged only: without hedging such a run spends the whole first-event
deadline on every retry, 768 s with the defaults).

Run: python3 bench/hedge_drill.py [--runs 20] [--hedge 2s] [--stall 30] [--silent 5]
Uses target/debug/tinyagent unless TINYAGENT names another binary (the
walls are the stubs' sleeps, not the binary's speed).
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TINYAGENT", os.path.join(ROOT, "target", "debug", "tinyagent"))
STEPS = 3


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "drill",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }) + "\n\n"


def reply(step):
    name, args = ("submit", {"output": "done"}) if step >= STEPS else ("list_files", {"path": "."})
    call = {"index": 0, "id": f"call_{step}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}
    return "".join([
        chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
        chunk({}, "tool_calls"),
        "data: [DONE]\n\n",
    ])


def make_stub(name):
    """A stub class whose `plan` says how long each request waits and
    whether it stalls after its headers."""

    class Stub(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        requests = 0
        lock = threading.Lock()
        # () -> (delay seconds, stall seconds or None)
        plan = staticmethod(lambda: (0.3, None))

        def log_message(self, *args):
            pass

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with Stub.lock:
                Stub.requests += 1
                delay, stall = Stub.plan()
            step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
            data = reply(step).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.flush()
                # Headers alone are no stream event (SPEC 23).
                time.sleep(stall if stall is not None else delay)
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client cut this request (a hedge won, or a deadline ran out)

    Stub.__name__ = name
    return Stub


def serve(stub):
    server = ThreadingHTTPServer(("127.0.0.1", 0), stub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def one_run(ports, hedge):
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w") as f:
            f.write("health_db: off\nproviders:\n")
            for name, port in zip(("primary", "fallback"), ports):
                f.write(f"  {name}:\n    api: openai\n"
                        f"    endpoint: http://127.0.0.1:{port}/v1\n")
        env = dict(os.environ, HOME=tmp, XDG_STATE_HOME=os.path.join(tmp, "state"),
                   XDG_CONFIG_HOME=os.path.join(tmp, "cfg"))
        cmd = [BIN, "-m", "primary/m", "--fallback-model", "fallback/m", "-c", config,
               "--json", "--no-save", "-C", tmp]
        if hedge:
            cmd += ["--hedge-after", hedge]
        start = time.perf_counter()
        out = subprocess.run(cmd + ["list the files, then submit"], env=env,
                             capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - start
    events = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    hedges = sum(1 for e in events if e.get("type") == "model.hedge")
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
    return out.returncode, wall, hedges


def p95(values):
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 95 // 100) - 1)]


def mode(label, hedge, runs, seed, stall, primary, fallback, ports):
    rng = random.Random(seed)
    primary.plan = staticmethod(lambda: (0.2, stall if rng.random() < 0.2 else None))
    fallback.plan = staticmethod(lambda: (0.3, None))
    primary.requests = fallback.requests = 0
    results = [one_run(ports, hedge) for _ in range(runs)]
    walls = [r[1] for r in results]
    failed = sum(1 for r in results if r[0] != 0)
    print(f"{label:<22} wall median {statistics.median(walls):6.2f}s  p95 {p95(walls):6.2f}s  "
          f"max {max(walls):6.2f}s  requests {primary.requests + fallback.requests:3d} "
          f"(primary {primary.requests}, fallback {fallback.requests})  "
          f"hedges {sum(r[2] for r in results)}  failed runs {failed}", flush=True)
    return failed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--hedge", default="2s")
    p.add_argument("--stall", type=float, default=30.0)
    p.add_argument("--silent", type=int, default=5)
    p.add_argument("--seed", type=int, default=36)
    p.add_argument("--hedged-only", action="store_true")
    args = p.parse_args()
    primary, fallback = make_stub("Primary"), make_stub("Fallback")
    servers = [serve(primary), serve(fallback)]
    ports = [s.server_address[1] for s in servers]
    print(f"{args.runs} runs of a {STEPS}-step task; primary: 1 in 5 requests stalls "
          f"{args.stall:.0f}s after its headers, else 0.2s; fallback 0.3s")
    failed = mode(f"--hedge-after {args.hedge}", args.hedge, args.runs, args.seed, args.stall,
                  primary, fallback, ports)
    if not args.hedged_only:
        failed += mode("no hedging", None, args.runs, args.seed, args.stall,
                       primary, fallback, ports)
    if args.silent:
        primary.plan = staticmethod(lambda: (0.2, 3600.0))
        primary.requests = fallback.requests = 0
        results = [one_run(ports, args.hedge) for _ in range(args.silent)]
        walls = [r[1] for r in results]
        failed += sum(1 for r in results if r[0] != 0)
        print(f"{'silent primary':<22} wall median {statistics.median(walls):6.2f}s  "
              f"max {max(walls):6.2f}s  ({args.silent} runs, --hedge-after {args.hedge}; "
              f"requests {primary.requests + fallback.requests})", flush=True)
    for s in servers:
        s.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
