#!/usr/bin/env python3
"""Peak memory of a 10-step task against an OpenAI-compatible server (issue
46's target: a run that uses no cloud pays nothing for the clouds).

A loopback Chat Completions stub (bench/deadline_drill.py's, answering at
once) serves a `list_files` tool call at every step but the last, then
`submit`. Each run is one tinyagent process, as a user runs it: `-m
openai/gpt-5` with `OPENAI_BASE_URL` at the stub, the health database and
the session saved in a fresh state directory, `--json` to a pipe. The
figure is the finished process's peak resident set as GNU time
(`/usr/bin/time`) reports it (its "Maximum resident set size"). With `--vs`, two binaries run in turn, A B A B ..., and the ratio
is taken pair by pair.

With `--smaps`, one more run of each binary stops at its last request (the
stub holds the reply) and its /proc/<pid>/smaps_rollup is printed: how much
of the resident set is the binary's own pages (file-backed) and how much
its heap and stacks (anonymous).

Run: python3 bench/memory_steps.py [--steps 10] [--runs 7] [--bin A] [--vs B] [--smaps]
Needs: cargo build --release; GNU time; python3 with the standard library only.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

spec = importlib.util.spec_from_file_location("deadline_drill", os.path.join(ROOT, "bench/deadline_drill.py"))
drill = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drill)


class Holding(drill.Stub):
    """The stub, holding its last reply while `hold` is set (for --smaps)."""

    hold = threading.Event()
    waiting = threading.Event()

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        import json
        step = 1 + sum(1 for m in json.loads(body)["messages"] if m["role"] == "assistant")
        if step >= drill.Stub.steps and Holding.hold.is_set():
            Holding.waiting.set()
            while Holding.hold.is_set():
                time.sleep(0.01)
        data = drill.reply(step, drill.Stub.steps).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


def command(binary, port, tmp):
    env = dict(os.environ, HOME=tmp, XDG_STATE_HOME=os.path.join(tmp, "state"),
               XDG_CONFIG_HOME=os.path.join(tmp, "cfg"), OPENAI_API_KEY="sk-bench",
               OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1")
    for var in ("ANTHROPIC_API_KEY", "TINYAGENT_MODEL"):
        env.pop(var, None)
    argv = [binary, "-m", "openai/gpt-5", "--json", "-C", tmp, "list the files"]
    return argv, env


def run(binary, port):
    """One run: (exit code, peak RSS in MiB), as GNU time reads
    them. (Not `os.wait4` on a child of this process: a child forked from
    Python carries Python's own resident set into its `ru_maxrss` until it
    execs, which would put Python's size in the figure.)"""
    with tempfile.TemporaryDirectory() as tmp:
        argv, env = command(binary, port, tmp)
        figures = os.path.join(tmp, "time")
        timed = ["/usr/bin/time", "-f", "%x %M", "-o", figures] + argv
        subprocess.run(timed, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        with open(figures) as f:
            code, kib = f.read().split()[-2:]
        return int(code), int(kib) / 1024


def smaps(binary, port):
    """The resident set of a run held at its last request, by kind."""
    Holding.waiting.clear()
    Holding.hold.set()
    with tempfile.TemporaryDirectory() as tmp:
        argv, env = command(binary, port, tmp)
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        Holding.waiting.wait(30)
        with open(f"/proc/{child.pid}/smaps_rollup") as f:
            rollup = f.read()
        Holding.hold.clear()
        child.wait()
    fields = dict(line.split(":", 1) for line in rollup.splitlines()[1:])
    kib = lambda k: int(fields[k].split()[0])
    return {k: kib(k) / 1024 for k in ("Rss", "Rss_Anon" if "Rss_Anon" in fields else "Anonymous", "Rss_File" if "Rss_File" in fields else "Shared_Clean")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--bin", default=os.path.join(ROOT, "target/release/tinyagent"))
    p.add_argument("--vs", help="a second binary, run in turn with the first")
    p.add_argument("--smaps", action="store_true")
    args = p.parse_args()
    drill.Stub.steps = args.steps
    drill.Stub.delay = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Holding)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    binaries = [args.bin] + ([args.vs] if args.vs else [])
    for b in binaries:
        run(b, port)  # warm-up: the binary's pages in the page cache
    results = {b: [] for b in binaries}
    for _ in range(args.runs):
        for b in binaries:
            results[b].append(run(b, port))
    failed = False
    for b in binaries:
        codes = {r[0] for r in results[b]}
        failed |= codes != {0}
        rss = [r[1] for r in results[b]]
        print(f"{b}: peak RSS median {statistics.median(rss):.2f} MiB "
              f"(min {min(rss):.2f}, max {max(rss):.2f}), "
              f"exit codes {sorted(codes)}, {args.runs} runs of {args.steps} steps")
    if args.vs:
        a, b = results[args.bin], results[args.vs]
        ratios = [x[1] / y[1] for x, y in zip(a, b)]
        print(f"A/B pair by pair: peak RSS median {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")
    if args.smaps:
        for b in binaries:
            parts = smaps(b, port)
            print(f"{b}: at the last request " + ", ".join(f"{k} {v:.2f} MiB" for k, v in parts.items()))
    server.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
