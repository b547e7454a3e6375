#!/usr/bin/env python3
"""Outage drill (issue 4): a primary that answers 503 forever, a healthy
fallback, a 30-step task, both on loopback Chat Completions stubs.

Reports, for default retry settings and for `fallback.switch_after: 1`:
  * time from start to the first answer from the fallback;
  * total wall time, and the extra over a healthy 30-step run;
  * requests the dead primary received after the switch.
Run: python3 bench/fallback_drill.py [runs]   (release build)
"""
import http.server, json, os, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "tinyagent")
STEPS = 30


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.times = []

    def hit(self):
        with self.lock:
            self.times.append(time.time())

    def reset(self):
        with self.lock:
            self.times = []


def chunk(delta, finish=None, usage=None):
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


def make_handler(recorder, dead):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            length = int(self.headers.get("content-length", 0))
            request = json.loads(self.rfile.read(length))
            recorder.hit()
            if dead:
                body = json.dumps({"error": {"message": "Service Unavailable", "type": "server_error"}}).encode()
                self.send_response(503)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            done = sum(1 for m in request["messages"] if m["role"] == "assistant")
            if done + 1 >= STEPS:
                name, args = "submit", json.dumps({"output": "done"})
            else:
                name, args = "bash", json.dumps({"command": "true"})
            events = [
                chunk({"role": "assistant", "content": None,
                       "tool_calls": [{"index": 0, "id": f"call_{done}", "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                chunk({}, finish="tool_calls"),
                chunk({}, usage={"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}),
                "data: [DONE]\n\n",
            ]
            body = "".join(events).encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    return Handler


def serve(recorder, dead):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(recorder, dead))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def run(args, config, workdir):
    start = time.time()
    proc = subprocess.run([BIN, "-c", config, "--json", "-q"] + args + ["drill"], cwd=workdir,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env={**os.environ, "XDG_STATE_HOME": tempfile.mkdtemp(), "KEY": "x"})
    events = [json.loads(l) for l in proc.stdout.splitlines()]
    assert events[-1]["status"] == "submitted", (events[-1], proc.stderr)
    return start, time.time() - start, events


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    dead_rec, live_rec = Recorder(), Recorder()
    dead_port, live_port = serve(dead_rec, True), serve(live_rec, False)
    tmp = tempfile.mkdtemp()
    base = (f"providers:\n  dead: {{api: openai, endpoint: 'http://127.0.0.1:{dead_port}/v1', api_key_env: KEY}}\n"
            f"  live: {{api: openai, endpoint: 'http://127.0.0.1:{live_port}/v1', api_key_env: KEY}}\n"
            "health_db: off\n")
    healthy = []
    for _ in range(runs):
        cfg = os.path.join(tmp, "h.yaml"); open(cfg, "w").write(base)
        _, wall, _ = run(["-m", "live/m"], cfg, tmp)
        healthy.append(wall)
    h = statistics.median(healthy)
    print(f"healthy 30-step run: median {h:.2f} s")
    for label, extra in [("default settings", ""), ("switch_after: 1", "fallback: {switch_after: 1}\n")]:
        firsts, walls, after = [], [], []
        for _ in range(runs):
            cfg = os.path.join(tmp, "o.yaml"); open(cfg, "w").write(base + extra)
            dead_rec.reset(); live_rec.reset()
            start, wall, events = run(["-m", "dead/m", "--fallback-model", "live/m"], cfg, tmp)
            first_live = live_rec.times[0]
            firsts.append(first_live - start)
            walls.append(wall)
            after.append(sum(1 for t in dead_rec.times if t > first_live))
        print(f"{label}: first fallback answer after {statistics.median(firsts):.2f} s, "
              f"total {statistics.median(walls):.2f} s (+{statistics.median(walls) - h:.2f} s over healthy), "
              f"dead-primary requests after the switch: {max(after)}")


if __name__ == "__main__":
    sys.exit(main())
