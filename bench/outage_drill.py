#!/usr/bin/env python3
"""Outage drill (issue 26, SPEC 18): a fleet of runs waits out an outage.

RUNS runs (default 16) on MACHINES simulated machines (default 2: each its
own HOME and XDG_STATE_HOME) share one real redis-server as their health
record (`health_db: redis://...`), each with `--outage-wait 10m`, on a
multi-step task against a loopback Chat Completions provider: each step
runs `bash` (`echo <run>:<step> >> log`), the last one submits. The
provider answers every run normally (after a short think) until the
outage starts, STEPS_BEFORE seconds in (every run is then some steps into
its task); it then answers 503 to everything for DOWN seconds (default
90), then answers again.

Reported, per drill:
  * exit codes (all 0?), steps done twice, tool calls run twice (the log);
  * requests to the dead provider during the outage: in all, each run's
    discovery (its requests before its `outage.waiting`) and the probes
    after it, with the number of probe intervals that fit in the outage;
  * from the provider's return: when the first run went on, and the last
    (each run's first answered request after the return);
  * the CPU time (user + system) each run used over the outage window
    (from /proc/<pid>/stat), median and max.
`--independent` gives each run a health record of its own (a SQLite file
each): every run retries on its own, as agents that wait inside one
process do.

Run: python3 bench/outage_drill.py [--runs 16] [--down 90] [--independent]
                                   [--repeat 1] [--bin target/release/tinyagent]
Needs redis-server on PATH and a built binary (cargo build --release).
"""
import argparse, http.server, json, os, shutil, socket, socketserver, statistics
import subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def chunk(delta, finish=None, usage=None):
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


class Provider:
    """The loopback provider: its outage window, and every request it got."""

    def __init__(self, steps, think, down_at, down_for, log):
        self.steps, self.think, self.log = steps, think, log
        self.down_at, self.down_for = down_at, down_for  # absolute times
        self.lock = threading.Lock()
        self.requests = []  # (time, run, step, status)

    def down(self, now):
        return self.down_at <= now < self.down_at + self.down_for

    def reply(self, request):
        now = time.time()
        run = next(m["content"] for m in request["messages"] if m["role"] == "user")
        step = 1 + sum(1 for m in request["messages"] if m["role"] == "assistant")
        status = 503 if self.down(now) else 200
        with self.lock:
            self.requests.append((now, run, step, status))
        if status == 503:
            return 503, json.dumps({"error": {"message": "Service Unavailable",
                                              "type": "server_error"}})
        time.sleep(self.think)
        if step >= self.steps:
            name, args = "submit", json.dumps({"output": "done"})
        else:
            name = "bash"
            args = json.dumps({"command": f"echo {run}:{step} >> {self.log}"})
        return 200, "".join([
            chunk({"role": "assistant", "content": None,
                   "tool_calls": [{"index": 0, "id": f"call_{step}", "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
            chunk({}, finish="tool_calls"),
            chunk({}, usage={"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}),
            "data: [DONE]\n\n",
        ])

    def handler(self):
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                status, body = provider.reply(json.loads(self.rfile.read(length)))
                body = body.encode()
                self.send_response(status)
                self.send_header("content-type",
                                 "text/event-stream" if status == 200 else "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def drill(args, independent):
    work = tempfile.mkdtemp(prefix="outage-drill-")
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while subprocess.run(["redis-cli", "-p", str(redis_port), "ping"],
                         capture_output=True).returncode != 0:
        time.sleep(0.05)
    log = os.path.join(work, "tools.log")
    start = time.time()
    provider = Provider(args.steps, args.think, start + args.before, args.down, log)
    server = Server(("127.0.0.1", 0), provider.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    procs = []
    for i in range(args.runs):
        machine = os.path.join(work, f"machine-{i % args.machines}")
        os.makedirs(os.path.join(machine, "state"), exist_ok=True)
        config = os.path.join(work, f"run-{i}.yaml")
        health = (f"health_db: {os.path.join(work, f'health-{i}.db')}\n" if independent
                  else f"health_db: redis://127.0.0.1:{redis_port}/0\n")
        with open(config, "w") as f:
            f.write(health + args.config)
        env = {"PATH": os.environ["PATH"], "HOME": machine,
               "XDG_STATE_HOME": os.path.join(machine, "state"),
               "OPENAI_API_KEY": "sk-drill", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
        out = open(os.path.join(work, f"run-{i}.jsonl"), "w")
        err = open(os.path.join(work, f"run-{i}.err"), "w")
        p = subprocess.Popen([args.bin, "--json", "-c", config, "-m", "openai/gpt-5",
                              "--outage-wait", args.wait, f"run-{i}"],
                             env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=work)
        procs.append(p)

    # CPU over the outage window.
    down_at, up_at = provider.down_at, provider.down_at + args.down
    time.sleep(max(0, down_at - time.time()))
    cpu_start = [cpu_seconds(p.pid) for p in procs]
    time.sleep(max(0, up_at - time.time()))
    cpu_end = [cpu_seconds(p.pid) for p in procs]
    codes = [p.wait() for p in procs]
    server.shutdown()
    redis.terminate()
    redis.wait()

    events = []
    for i in range(args.runs):
        with open(os.path.join(work, f"run-{i}.jsonl")) as f:
            events.append([json.loads(line) for line in f if line.strip()])

    def ts(e):
        from datetime import datetime
        return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()

    waits = {}
    for i, ev in enumerate(events):
        w = [e for e in ev if e["type"] == "outage.waiting"]
        if w:
            waits[f"run-{i}"] = ts(w[0])
    in_window = [r for r in provider.requests if down_at <= r[0] < up_at]
    if args.trace:
        for (t, run, step, status) in in_window:
            waited = run in waits and t >= waits[run]
            print(f"  {t - down_at:7.3f}s {run} step {step} {'probe' if waited else 'discovery'}")
        for run, t in sorted(waits.items()):
            print(f"  {run} waits from {t - down_at:7.3f}s")
    discovery = sum(1 for (t, run, _, _) in in_window if t < waits.get(run, float("inf")))
    probes = len(in_window) - discovery
    back = {}
    for (t, run, step, status) in provider.requests:
        if t >= up_at and status == 200 and run not in back:
            back[run] = t - up_at
    with open(log) as f:
        lines = [l.strip() for l in f if l.strip()]
    twice = len(lines) - len(set(lines))
    expected = args.runs * (args.steps - 1)
    cpu = [b - a for a, b in zip(cpu_start, cpu_end) if a is not None and b is not None]
    steps_at_outage = [max((s for (t, run, s, st) in provider.requests
                            if run == f"run-{i}" and t < down_at), default=0) - 1
                       for i in range(args.runs)]
    if args.keep:
        print(f"  kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "exit_codes": sorted(set(codes)),
        "all_exit_0": all(c == 0 for c in codes),
        "steps_done_at_outage_min": min(steps_at_outage),
        "tool_calls": len(lines), "tool_calls_expected": expected, "run_twice": twice,
        "requests_while_down": len(in_window), "discovery": discovery, "probes": probes,
        "first_back_s": round(min(back.values()), 2) if back else None,
        "last_back_s": round(max(back.values()), 2) if len(back) == args.runs else None,
        "cpu_s_median": round(statistics.median(cpu), 3) if cpu else None,
        "cpu_s_max": round(max(cpu), 3) if cpu else None,
    }


def intervals(backoff, down):
    """Probe due times within `down` s of the first wait: backoff * 2^n, capped at 60 s."""
    t, n, count = backoff, 0, 0
    while t < down:
        count += 1
        n += 1
        t += min(backoff * 2 ** n, 60)
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--machines", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="steps of each run's task")
    ap.add_argument("--think", type=float, default=0.3, help="seconds per answered request")
    ap.add_argument("--before", type=float, default=8.0, help="seconds before the outage")
    ap.add_argument("--down", type=float, default=90.0)
    ap.add_argument("--wait", default="10m")
    ap.add_argument("--independent", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--trace", action="store_true", help="print each request of the outage")
    ap.add_argument("--keep", action="store_true", help="keep the runs' files")
    ap.add_argument("--config", default="", help="more config for every run (YAML)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "tinyagent"))
    args = ap.parse_args()
    print(f"# {args.runs} runs on {args.machines} machines, outage {args.down}s "
          f"({'each run its own record' if args.independent else 'one Redis record'}); "
          f"probe intervals that fit: {intervals(0.5, args.down)}", flush=True)
    results = []
    for _ in range(args.repeat):
        r = drill(args, args.independent)
        print(json.dumps(r), flush=True)
        results.append(r)
    if len(results) > 1:
        keys = ["requests_while_down", "discovery", "probes", "first_back_s", "last_back_s",
                "cpu_s_median", "cpu_s_max"]
        med = {k: statistics.median([r[k] for r in results if r[k] is not None] or [0])
               for k in keys}
        print("median " + json.dumps(med))


if __name__ == "__main__":
    main()
