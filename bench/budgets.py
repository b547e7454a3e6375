#!/usr/bin/env python3
"""Budget drill (SPEC section 19, issue 27).

1. Overshoot: RUNS runs (default 16) on 2 simulated machines (each its own
   HOME and XDG_STATE_HOME) start together, sharing one loopback
   redis-server and one budget `{usd: CAP, per: day}`, against a loopback
   Chat Completions server whose every reply (a `plan` tool call, so no
   process is spawned) reports 1000 input and 100 output tokens, priced at
   $0.01, after DELAY_MS. Every run goes on until the budget stops it
   (`budget_limit`, exit 3). From each run's `--log-db` (`model_requests`:
   when each request started and how long it took) the drill finds the
   moment the cap was reached (the end of the reply that took the fleet's
   spend to CAP) and the requests in flight then (started before it, ended
   after it); it reports the spend over the cap in requests and dollars
   next to that bound, and the total in Redis.
2. Per request, end to end: one run of STEPS steps against the same server
   (no delay), with no budget and with three (fleet per day, the model's
   per day, the provider's per month), on the SQLite file and on Redis:
   median wall time per step over REPEAT alternating pairs.

The in-process figures (the gate's look and the spend alone, a scripted
model and Chat Completions over loopback) come from
`cargo test --release --lib model::gate::budget::bench -- --ignored --nocapture`.

Run: python3 bench/budgets.py   (after cargo build --release; needs redis-server)
     RUNS=16 CAP=1.00 DELAY_MS=30 REPEAT=3 STEPS=200 python3 bench/budgets.py
The drill uses the current UTC day: do not start it in the last minute of one.
"""
import http.server, json, math, os, socket, sqlite3, statistics, subprocess, sys, tempfile, threading, time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TINYAGENT", os.path.join(ROOT, "target", "release", "tinyagent"))
RUNS = int(os.environ.get("RUNS", 16))
CAP = float(os.environ.get("CAP", 1.00))
DELAY_MS = int(os.environ.get("DELAY_MS", 30))
REPEAT = int(os.environ.get("REPEAT", 3))
STEPS = int(os.environ.get("STEPS", 200))
COST = 0.01  # 1000 input tokens at $5/M + 100 output tokens at $50/M


def chunk(delta, finish=None):
    return "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


REPLY = (chunk({"role": "assistant", "content": None, "tool_calls": [
    {"index": 0, "id": "call_1", "type": "function",
     "function": {"name": "plan", "arguments": json.dumps({"items": [{"text": "go on", "status": "in_progress"}]})}}]})
    + chunk({}, "tool_calls")
    + "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                             "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}}) + "\n\n"
    + "data: [DONE]\n\n").encode()

DELAY = [0.0]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if DELAY[0]:
            time.sleep(DELAY[0])
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout.strip()


def machine(work, name, endpoint, health_db, budgets):
    home = os.path.join(work, name)
    os.makedirs(os.path.join(home, "state"), exist_ok=True)
    config = os.path.join(home, "config.yaml")
    with open(config, "w") as f:
        f.write(f"""providers:
  gw:
    api: openai
    endpoint: {endpoint}
    models:
      m: {{input_price: 5, output_price: 50}}
health_db: "{health_db}"
budgets: {budgets}
""")
    return {"PATH": os.environ["PATH"], "HOME": home, "XDG_STATE_HOME": os.path.join(home, "state"),
            "TINYAGENT_CONFIG": config}


def parse_ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def drill(work, endpoint, redis_port, rep):
    redis_cli(redis_port, "flushall")
    url = f"redis://127.0.0.1:{redis_port}/0"
    budgets = f"[{{usd: {CAP}, per: day}}]"
    envs = [machine(work, f"drill-{rep}-{m}", endpoint, url, budgets) for m in "ab"]
    DELAY[0] = DELAY_MS / 1000
    procs = []
    for i in range(RUNS):
        env = envs[i % 2]
        log = os.path.join(env["HOME"], f"run-{i}.db")
        procs.append((log, subprocess.Popen(
            [BIN, "--json", "-m", "gw/m", "--log-db", log, "--step-limit", "100000", "--no-save", "budget drill"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)))
    requests, statuses = [], []
    for log, p in procs:
        out, _ = p.communicate()
        end = json.loads(out.decode().strip().splitlines()[-1])
        statuses.append((end["status"], p.returncode))
        with sqlite3.connect(log) as db:
            for started, duration, cost, outcome in db.execute(
                    "SELECT started_at, duration_ms, cost_usd, outcome FROM model_requests"):
                start = parse_ts(started)
                requests.append((start, start + duration / 1000, cost, outcome))
    ok = [r for r in requests if r[3] == "ok"]
    ok.sort(key=lambda r: r[1])
    total, t_cap = 0.0, None
    for start, end, cost, _ in ok:
        total += cost
        if t_cap is None and total >= CAP - 1e-9:
            t_cap = end
    in_flight = sum(1 for r in requests if r[0] <= t_cap < r[1]) if t_cap else 0
    key = [k for k in redis_cli(redis_port, "--scan", "--pattern", "tinyagent:budget:*").split() if k]
    stored = int(redis_cli(redis_port, "GET", key[0])) / 1e9 if key else float("nan")
    needed = math.ceil(CAP / COST - 1e-9)
    return {
        "requests": len(requests), "needed": needed, "over_requests": len(ok) - needed,
        "over_usd": total - CAP, "in_flight": in_flight, "stored": stored,
        "all_budget_limit": all(s == ("budget_limit", 3) for s in statuses),
    }


def per_step(env, label):
    started = time.perf_counter()
    subprocess.run([BIN, "--json", "-m", "gw/m", "--step-limit", str(STEPS), "--no-save", "speed"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - started) / STEPS


def speed(work, endpoint, redis_port):
    DELAY[0] = 0.0
    many = "[{usd: 1000000, per: day}, {usd: 1000000, per: day, model: gw/m}, {usd: 1000000, per: month, provider: gw}]"
    rows = []
    for record, db in [("SQLite file", None), ("Redis (loopback)", f"redis://127.0.0.1:{redis_port}/1")]:
        pairs = []
        for r in range(REPEAT):
            health = db or os.path.join(work, f"speed-{r}.db")
            without = machine(work, f"speed-{r}-none", endpoint, health, "[]")
            with_b = machine(work, f"speed-{r}-three", endpoint, health, many)
            pairs.append((per_step(without, "none"), per_step(with_b, "three")))
        a = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        d = statistics.median(p[1] - p[0] for p in pairs)
        rows.append((record, a, b, d))
    return rows


def main():
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} not found: cargo build --release first")
    work = tempfile.mkdtemp(prefix="tinyagent-budget-drill-")
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1"
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        while redis_cli(redis_port, "ping") != "PONG":
            time.sleep(0.02)
        print(f"budget drill: {RUNS} runs on 2 machines, one redis-server, budget ${CAP:.2f} per day, "
              f"${COST} per reply, {DELAY_MS} ms per reply")
        print("| repetition | requests | needed to reach the cap | over the cap | in flight at the cap | spend in Redis | all budget_limit |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        results = []
        for rep in range(1, REPEAT + 1):
            r = drill(work, endpoint, redis_port, rep)
            results.append(r)
            print(f"| {rep} | {r['requests']} | {r['needed']} | {r['over_requests']} requests, ${r['over_usd']:.2f} "
                  f"| {r['in_flight']} | ${r['stored']:.2f} | {'yes' if r['all_budget_limit'] else 'NO'} |")
        print(f"median over the cap: {statistics.median(r['over_requests'] for r in results)} requests "
              f"(${statistics.median(r['over_usd'] for r in results):.2f}); "
              f"median in flight at the cap: {statistics.median(r['in_flight'] for r in results)}")
        print()
        print(f"per step, end to end ({STEPS} steps, loopback server answering at once, median of {REPEAT} pairs):")
        print("| record | no budgets | 3 budgets | added per step |")
        print("| --- | --- | --- | --- |")
        for record, a, b, d in speed(work, endpoint, redis_port):
            print(f"| {record} | {a * 1000:.2f} ms | {b * 1000:.2f} ms | {d * 1000:+.2f} ms |")
    finally:
        redis.kill()
        server.shutdown()


if __name__ == "__main__":
    main()
