#!/usr/bin/env python3
"""Tracing benchmark (issue 16): what OTLP export costs a run.

Runs the release binary on a 200-step `script/` run (`--no-save`, so the
run store's thread is not in the figures), alternating tracing
off (no OTEL_* variable) and on (OTEL_EXPORTER_OTLP_ENDPOINT pointing at a
loopback OTLP/HTTP receiver in this script that answers 200 to every POST),
and prints the median wall time of each: for a 1-step run (`submit`
alone: what tracing costs once per run) and for two kinds of step:
  * `plan` each step (an in-process tool: the agent's own time, so the
    figure is the hardest test of the 5 % target);
  * `bash true` each step (a real command, with TRACEPARENT handed to it).
Also `--version` with tracing configured (it must initialise nothing).
Run: python3 bench/otel.py [runs]   (builds with `cargo build --release`;
BENCH_BIN=path skips the build and times that binary)
"""
import http.server, os, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BENCH_BIN") or os.path.join(ROOT, "target", "release", "tinyagent")


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    spans_bytes = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        Receiver.spans_bytes += len(body)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def run(args, env, cwd):
    start = time.perf_counter()
    proc = subprocess.run([BIN] + args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    return wall


def script(path, steps, call):
    with open(path, "w") as f:
        if steps > 1:
            f.write(f"- tool_calls:\n  - {call}\n  usage: {{input: 1000, output: 20}}\n  repeat: {steps - 1}\n")
        f.write("- tool_calls:\n  - {name: submit, arguments: {output: done}}\n")


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    if not os.environ.get("BENCH_BIN"):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    tmp = tempfile.mkdtemp()
    off = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "TRACEPARENT"}
    on = dict(off, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    on_json = dict(on, OTEL_EXPORTER_OTLP_PROTOCOL="http/json")

    versions = [run(["--version"], on, tmp) for _ in range(50)]
    print(f"--version with tracing configured: median {statistics.median(versions)*1000:.2f} ms")

    plan = "{name: plan, arguments: {items: [{text: step, status: in_progress}]}}"
    for steps, label, call in [(1, "submit", None),
                               (200, "plan", plan),
                               (200, "bash true", "{name: bash, arguments: {command: 'true'}}")]:
        path = os.path.join(tmp, "s.yaml")
        script(path, steps, call)
        args = ["-m", f"script/{path}", "-q", "--no-save", "bench"]
        times = {"off": [], "on": [], "on (http/json)": []}
        for _ in range(runs):
            for mode, env in [("off", off), ("on", on), ("on (http/json)", on_json)]:
                times[mode].append(run(args, env, tmp))
        base = statistics.median(times["off"])
        for mode, walls in times.items():
            med = statistics.median(walls)
            print(f"{steps} step{'s' if steps > 1 else ''} ({label}), tracing {mode}: median {med*1000:.1f} ms ({(med/base-1)*100:+.1f} %)")
    server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
