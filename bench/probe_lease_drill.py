#!/usr/bin/env python3
"""Probe lease drill (issue 37, SPEC 18): one probe per model per fleet.

RUNS runs (default 16) with a chain of two models (`-m openai/gpt-5
--fallback-model openai/gpt-5-mini`, both on one loopback Chat Completions
provider) and `--outage-wait 2m` start together; the provider answers 503
to everything for DOWN seconds (default 8) from its first request, then
submits. Retry settings make the race likely: `attempts: 2, backoff: 200ms,
max_backoff: 1s, jitter: 0`, `fallback.cooldown: 1s`, so every run finds
both models down within a second and waits, the fleet's probes come due at
one moment for everyone, and one run starts LATE seconds after the others
(it joins a wait in progress).

Two records:
  * `--store redis`: one redis-server, the runs split over MACHINES
    simulated machines (default 2: each its own HOME and XDG_STATE_HOME;
    tinyagent has no host identity of its own beyond that);
  * `--store sqlite`: one machine, one health_db file.

Counted, per repetition: the requests to one model less than 100 ms after
the one before it to that model, once every run that started together has
emitted `outage.waiting` and until the provider is back (SPEC 18: only the
holder of the model's probe lease sends, the others read its outcome).
Also: the requests in that window, and whether every run exited 0.

Run: python3 bench/probe_lease_drill.py [--store redis|sqlite] [--runs 16]
        [--repeat 20] [--down 8] [--bin target/debug/tinyagent]
Needs redis-server on PATH for `--store redis`, and a built binary.
"""
import argparse, http.server, json, os, shutil, socket, socketserver, subprocess
import tempfile, threading, time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = ("retry: {attempts: 2, backoff: 200ms, max_backoff: 1s, jitter: 0}\n"
          "fallback: {cooldown: 1s}\n")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def chunk(delta, finish=None):
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


SUBMIT = "".join([
    chunk({"role": "assistant", "content": None,
           "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "submit", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"output": "done"}'}}]}),
    chunk({}, finish="tool_calls"),
    "data: [DONE]\n\n",
])


class Provider:
    """Down for `down` s from its first request; every request it got."""

    def __init__(self, down):
        self.down = down
        self.lock = threading.Lock()
        self.first = None
        self.requests = []  # (time, model, status)

    def reply(self, request):
        now = time.time()
        with self.lock:
            if self.first is None:
                self.first = now
            status = 503 if now < self.first + self.down else 200
            self.requests.append((now, request.get("model"), status))
        if status == 503:
            return 503, json.dumps({"error": {"message": "Service Unavailable",
                                              "type": "server_error"}})
        return 200, SUBMIT

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


def start_redis():
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while subprocess.run(["redis-cli", "-p", str(port), "ping"],
                         capture_output=True).returncode != 0:
        time.sleep(0.05)
    return redis, f"redis://127.0.0.1:{port}/0"


def ts(event):
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def drill(args):
    work = tempfile.mkdtemp(prefix="lease-drill-")
    redis, health = (start_redis() if args.store == "redis"
                     else (None, os.path.join(work, "health.db")))
    machines = args.machines if args.store == "redis" else 1
    provider = Provider(args.down)
    server = Server(("127.0.0.1", 0), provider.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    def spawn(i):
        machine = os.path.join(work, f"machine-{i % machines}")
        os.makedirs(os.path.join(machine, "state"), exist_ok=True)
        config = os.path.join(work, f"run-{i}.yaml")
        with open(config, "w") as f:
            f.write(f'health_db: "{health}"\n' + CONFIG)
        env = {"PATH": os.environ["PATH"], "HOME": machine,
               "XDG_STATE_HOME": os.path.join(machine, "state"),
               "OPENAI_API_KEY": "sk-drill", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
        out = open(os.path.join(work, f"run-{i}.jsonl"), "w")
        err = open(os.path.join(work, f"run-{i}.err"), "w")
        return subprocess.Popen([args.bin, "--json", "-c", config, "-m", "openai/gpt-5",
                                 "--fallback-model", "openai/gpt-5-mini",
                                 "--outage-wait", "2m", f"run-{i}"],
                                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=work)

    procs = [spawn(i) for i in range(args.runs - 1)]
    time.sleep(args.late)
    procs.append(spawn(args.runs - 1))
    codes = [p.wait() for p in procs]
    server.shutdown()
    if redis:
        redis.terminate()
        redis.wait()

    waits = []
    for i in range(args.runs - 1):
        with open(os.path.join(work, f"run-{i}.jsonl")) as f:
            events = [json.loads(line) for line in f if line.strip()]
        waits += [ts(e) for e in events if e["type"] == "outage.waiting"][:1]
    all_wait = max(waits) if len(waits) == args.runs - 1 else None
    up_at = provider.first + args.down
    window = [r for r in provider.requests
              if all_wait is not None and all_wait <= r[0] < up_at]
    pairs, gaps = 0, []
    for model in {r[1] for r in window}:
        times = sorted(t for (t, m, _) in window if m == model)
        for a, b in zip(times, times[1:]):
            if b - a < 0.1:
                pairs += 1
                gaps.append(round((b - a) * 1000, 1))
    if args.keep:
        print(f"  kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return {"exit_codes": sorted(set(codes)), "all_waited": all_wait is not None,
            "requests_while_all_waited": len(window), "close_pairs": pairs,
            "close_gaps_ms": sorted(gaps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--machines", type=int, default=2)
    ap.add_argument("--down", type=float, default=8.0)
    ap.add_argument("--late", type=float, default=2.5, help="seconds before the last run starts")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the runs' files")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "tinyagent"))
    args = ap.parse_args()
    print(f"# {args.runs} runs ({args.runs - 1} together, 1 {args.late}s later), "
          f"store {args.store}" + (f" on {args.machines} machines" if args.store == "redis" else "")
          + f", both models down {args.down}s", flush=True)
    results = []
    for _ in range(args.repeat):
        r = drill(args)
        print(json.dumps(r), flush=True)
        results.append(r)
    total = sum(r["close_pairs"] for r in results)
    bad = sum(1 for r in results if r["close_pairs"])
    exits = sorted({c for r in results for c in r["exit_codes"]})
    requests = sum(r["requests_while_all_waited"] for r in results)
    print(f"# {len(results)} repetitions: {total} pairs < 100 ms in {bad} of them; "
          f"{requests} requests while all waited; exit codes {exits}", flush=True)


if __name__ == "__main__":
    main()
