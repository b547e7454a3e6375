#!/usr/bin/env python3
"""Pacing benchmark (issue 25, SPEC 17): runs sharing one API key against a
server that enforces a per-key rate limit and publishes it in OpenAI's
`x-ratelimit-*` headers.

A Chat Completions stub on loopback plays a 10-step side-effect task (each
step asks for `echo <step> >> log.txt` through `bash`, then `done`: 11
requests per run). It enforces, per API key, a rolling window of REQUESTS
requests and TOKENS input tokens per WINDOW seconds (a request's tokens are
its body's length / 4, the count its `usage` reports). Every reply, 429s
included, carries the six headers; a reset is the time until the window is
whole again (the newest request in it leaves), as OpenAI documents it ("the
time until the rate limit resets to its initial state"). A refused request
gets a 429 with OpenAI's `rate_limit_exceeded` body and a `Retry-After` of
the time until the oldest request in the window leaves.

Scenarios, each with `pacing: on` (the default) and `pacing: off` (what
every run did before), one key for every run:
  one machine  RUNS runs at once, one state directory (the SQLite file)
  two machines 2 x RUNS runs at once, two state directories sharing one
               redis-server (health_db: redis://...)
  two files    2 x RUNS runs at once, two state directories, no Redis (each
               machine paces alone: what Redis is for)
Reported per scenario: 429s received, runs that failed, paced waits, and the
wall time from the first start to the last end against the limit's own
minimum, requests / rate (rate = REQUESTS / WINDOW).

Run:  python3 bench/pacing.py
      TINYAGENT=path/to/binary RUNS=8 REQUESTS=40 WINDOW=5 REPEAT=3 python3 bench/pacing.py
(builds the release binary first unless TINYAGENT is set; needs redis-server).
"""
import collections, http.server, json, os, shutil, socket, statistics, subprocess
import sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 10
RUNS = int(os.environ.get("RUNS", "8"))
REQUESTS = int(os.environ.get("REQUESTS", "40"))
TOKENS = int(os.environ.get("TOKENS", "2000000"))
WINDOW = float(os.environ.get("WINDOW", "5"))
REPEAT = int(os.environ.get("REPEAT", "3"))
KEY = "sk-bench-shared-key"


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
        "model": "gpt-bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }) + "\n\n"


def usage_chunk(prompt):
    return "data: " + json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
        "model": "gpt-bench", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20},
    }) + "\n\n"


def reply_events(request, prompt):
    step = sum(1 for m in request.get("messages", []) if m.get("role") == "tool")
    if step >= STEPS:
        return [chunk({"role": "assistant", "content": ""}), chunk({"content": "done"}),
                chunk({}, "stop"), usage_chunk(prompt), "data: [DONE]\n\n"]
    args = json.dumps({"command": f"echo {step} >> log.txt"})
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": f"call_{step}", "type": "function",
             "function": {"name": "bash", "arguments": args}}]}),
        chunk({}, "tool_calls"), usage_chunk(prompt), "data: [DONE]\n\n",
    ]


def go_duration(seconds):
    """A Go-style duration as OpenAI sends it: `1.5s`, `20ms`, `1m2s`."""
    ms = max(0, int(round(seconds * 1000)))
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    return f"{ms // 60_000}m{(ms % 60_000) / 1000:g}s"


class Limiter:
    """Per key: the requests of the last WINDOW seconds, with their tokens."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.windows = collections.defaultdict(collections.deque)
            self.accepted = 0
            self.refused = 0

    def admit(self, key, tokens):
        """(accepted, headers, retry_after) for a request of `tokens`."""
        now = time.monotonic()
        with self.lock:
            window = self.windows[key]
            while window and window[0][0] <= now - WINDOW:
                window.popleft()
            used = sum(t for _, t in window)
            ok = len(window) < REQUESTS and used + tokens <= TOKENS
            if ok:
                window.append((now, tokens))
                used += tokens
                self.accepted += 1
            else:
                self.refused += 1
            whole = (window[-1][0] + WINDOW - now) if window else 0.0
            next_free = (window[0][0] + WINDOW - now) if window else 0.0
            headers = [
                ("x-ratelimit-limit-requests", str(REQUESTS)),
                ("x-ratelimit-remaining-requests", str(max(0, REQUESTS - len(window)))),
                ("x-ratelimit-reset-requests", go_duration(whole)),
                ("x-ratelimit-limit-tokens", str(TOKENS)),
                ("x-ratelimit-remaining-tokens", str(max(0, TOKENS - used))),
                ("x-ratelimit-reset-tokens", go_duration(whole)),
            ]
            return ok, headers, next_free


LIMITER = Limiter()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        key = self.headers.get("authorization", "")
        tokens = len(body) // 4
        ok, headers, next_free = LIMITER.admit(key, tokens)
        if not ok:
            data = json.dumps({"error": {
                "message": "Rate limit reached for requests", "type": "requests",
                "param": None, "code": "rate_limit_exceeded"}}).encode()
            self.send_response(429)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("retry-after", str(max(1, int(next_free + 0.999))))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        for event in reply_events(json.loads(body), tokens):
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(binary, port, machine, config):
    work = tempfile.mkdtemp(dir=machine)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": machine,
           "XDG_STATE_HOME": os.path.join(machine, "state"),
           "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
           "TINYAGENT_CONFIG": config}
    return work, subprocess.Popen(
        [binary, "-m", "openai/gpt-5", "--json", "-q", "--no-save", "log the steps"],
        cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)


def scenario(binary, port, tmp, machines, config_text):
    """Starts RUNS runs on each machine at once; returns the figures."""
    LIMITER.reset()
    homes = []
    for m in range(machines):
        home = tempfile.mkdtemp(dir=tmp)
        config = os.path.join(home, "config.yaml")
        with open(config, "w") as f:
            f.write(config_text)
        homes.append((home, config))
    start = time.monotonic()
    procs = [launch(binary, port, home, config) for home, config in homes for _ in range(RUNS)]
    failed, paced, waited = 0, 0, 0.0
    for work, proc in procs:
        out, _ = proc.communicate(timeout=900)
        events = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        final = next((e for e in reversed(events) if e.get("type") == "run.finished"), {})
        lines = open(os.path.join(work, "log.txt")).read().split() \
            if os.path.exists(os.path.join(work, "log.txt")) else []
        if proc.returncode != 0 or final.get("output") != "done" or \
                lines != [str(i) for i in range(STEPS)]:
            failed += 1
        for e in events:
            if e.get("type") == "provider.paced":
                paced += 1
                waited += e.get("wait_seconds", 0.0)
    wall = time.monotonic() - start
    requests = LIMITER.accepted
    return {"wall": wall, "refused": LIMITER.refused, "failed": failed, "paced": paced,
            "waited": waited, "accepted": requests,
            "minimum": requests / (REQUESTS / WINDOW)}


def main():
    binary = os.environ.get("TINYAGENT")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "tinyagent")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp()
    try:
        while subprocess.run(["redis-cli", "-p", str(redis_port), "ping"],
                             capture_output=True).returncode != 0:
            time.sleep(0.05)
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        cases = [
            ("one machine (file)", 1, ""),
            ("two machines (Redis)", 2, f"health_db: {redis_url}\n"),
            ("two machines (a file each)", 2, ""),
        ]
        print(f"limit {REQUESTS} requests and {TOKENS} tokens per {WINDOW:g} s per key; "
              f"{RUNS} runs per machine, {STEPS}-step task, {REPEAT} repeats, medians")
        print("| scenario | pacing | 429s | failed runs | paced waits | wall time | "
              "minimum (requests / rate) | wall / minimum |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for label, machines, config in cases:
            for pacing in ("on", "off"):
                results = []
                for _ in range(REPEAT):
                    subprocess.run(["redis-cli", "-p", str(redis_port), "flushall"],
                                   capture_output=True)
                    results.append(scenario(binary, port, tmp, machines,
                                            f"{config}pacing: {pacing}\n"))
                med = lambda k: statistics.median(r[k] for r in results)
                print(f"| {label} | {pacing} | {med('refused'):g} "
                      f"({min(r['refused'] for r in results)}–{max(r['refused'] for r in results)}) | "
                      f"{med('failed'):g} | {med('paced'):g} | {med('wall'):.1f} s | "
                      f"{med('minimum'):.1f} s | {med('wall') / med('minimum'):.2f} |", flush=True)
    finally:
        redis.terminate()
        redis.wait()
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
