#!/usr/bin/env python3
"""Fault-injection benchmark (issue 17): how fast a run recovers from a
flaky model link, and whether any tool call runs twice.

A Chat Completions stub on loopback plays a 10-step side-effect task: at
each step it asks for `echo <step> >> log.txt` (the step being the number of
tool results in the request), then answers `done`. A proxy on loopback in
front of it injects, per model request and with probability RATE, one fault
drawn from a seeded random sequence:

  429    HTTP 429 with `Retry-After: 1` (OpenAI's rate-limit error body)
  503    HTTP 503 (OpenAI's overloaded body)
  529    HTTP 529 (Anthropic's overloaded body)
  drop   the upstream's 200 and first SSE chunk, then the connection is cut
  empty  a well-formed, finished stream with no text and no tool calls

A run passes when it exits 0 with `done`, and log.txt holds 0..9 once each,
in order (a duplicated tool run shows as a repeated line, an empty reply
taken as the answer as missing lines). Each run's seed depends only on the
rate and the run's index, so every build sees the same fault sequences.

Run:  python3 bench/faults.py [runs per rate, default 10]
      TINYAGENT=path/to/binary python3 bench/faults.py 10
(builds the release binary first unless TINYAGENT is set). Defaults apply
to retries (6 attempts, 500 ms backoff doubling, jitter 0.5), no chain.
"""
import http.client, http.server, json, os, random, shutil, socket, statistics
import subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 10
RATES = [float(r) for r in os.environ.get("RATES", "0 0.1 0.2 0.4").split()]
KINDS = ["429", "503", "529", "drop", "empty"]


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
        "model": "gpt-bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }) + "\n\n"


def usage_chunk():
    return "data: " + json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
        "model": "gpt-bench", "choices": [],
        "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
    }) + "\n\n"


def reply_events(request):
    """The stub's reply: the next `echo`, or `done` after STEPS of them."""
    step = sum(1 for m in request.get("messages", []) if m.get("role") == "tool")
    if step >= STEPS:
        return [chunk({"role": "assistant", "content": ""}), chunk({"content": "done"}),
                chunk({}, "stop"), usage_chunk(), "data: [DONE]\n\n"]
    args = json.dumps({"command": f"echo {step} >> log.txt"})
    half = len(args) // 2
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": f"call_{step}", "type": "function",
             "function": {"name": "bash", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:half]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}),
        chunk({}, "tool_calls"), usage_chunk(), "data: [DONE]\n\n",
    ]


def empty_events():
    return [chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), usage_chunk(),
            "data: [DONE]\n\n"]


ERRORS = {
    "429": ({"error": {"message": "Rate limit reached for requests", "type": "requests",
                       "param": None, "code": "rate_limit_exceeded"}}, [("retry-after", "1")]),
    "503": ({"error": {"message": "The server is overloaded or not ready yet.",
                       "type": "server_error", "param": None, "code": None}}, []),
    "529": ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, []),
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        return self.rfile.read(int(self.headers.get("content-length", 0)))

    def send_stream(self, events, cut_after=None):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i, event in enumerate(events):
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if cut_after is not None and i + 1 >= cut_after:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def send_json(self, status, body, headers):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class Upstream(Handler):
    """The stub server: plays the task, never fails."""

    def do_POST(self):
        self.send_stream(reply_events(json.loads(self.body())))


class Faults:
    """The proxy's seeded fault sequence and what it injected."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset(0.0, 0)

    def reset(self, rate, seed):
        with self.lock:
            self.rate, self.rng, self.injected, self.asked_wait = rate, random.Random(seed), [], 0.0

    def draw(self):
        with self.lock:
            kind = self.rng.choice(KINDS) if self.rng.random() < self.rate else None
            if kind is not None:
                self.injected.append(kind)
            if kind == "429":
                self.asked_wait += 1.0
            return kind


def proxy_handler(faults, upstream_port):
    class Proxy(Handler):
        def do_POST(self):
            body = self.body()
            kind = faults.draw()
            if kind in ERRORS:
                payload, headers = ERRORS[kind]
                return self.send_json(int(kind), payload, headers)
            if kind == "empty":
                return self.send_stream(empty_events())
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
            conn.request("POST", self.path, body, {"content-type": "application/json"})
            response = conn.getresponse()
            text = response.read().decode()
            conn.close()
            events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
            self.send_stream(events, cut_after=1 if kind == "drop" else None)
    return Proxy


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def one_run(binary, proxy_port, home):
    work = tempfile.mkdtemp(dir=home)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": f"http://127.0.0.1:{proxy_port}/v1",
           "TINYAGENT_CONFIG": os.path.join(home, "config.yaml")}
    start = time.monotonic()
    proc = subprocess.run([binary, "-m", "openai/gpt-5", "--json", "-q", "log the steps"],
                          cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)
    wall = time.monotonic() - start
    log_path = os.path.join(work, "log.txt")
    lines = open(log_path).read().split() if os.path.exists(log_path) else []
    events = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    final = next((e for e in reversed(events) if e.get("type") == "run.finished"), {})
    answered = proc.returncode == 0 and final.get("output") == "done"
    expected = [str(i) for i in range(STEPS)]
    duplicated = len(lines) - len(set(lines))
    shutil.rmtree(work, ignore_errors=True)
    ok = answered and lines == expected
    waited = sum(e.get("wait_seconds", 0) for e in events if e.get("type") == "provider.retry")
    why = "" if ok else f"status {final.get('status')}, error {final.get('error')}, log {lines}"
    return ok, duplicated, wall, why, waited


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    binary = os.environ.get("TINYAGENT")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "tinyagent")
    binary = os.path.abspath(binary)
    home = tempfile.mkdtemp(prefix="tinyagent-faults-")
    open(os.path.join(home, "config.yaml"), "w").write("health_db: off\n")
    faults = Faults()
    up, up_port = serve(Upstream)
    px, px_port = serve(proxy_handler(faults, up_port))
    failures = []
    print(f"{runs} runs per fault rate, {STEPS}-step task, binary {binary}")
    print("| fault rate | pass | duplicated tool runs | median time | median waited (all retries) | median Retry-After asked | faults injected |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    try:
        for rate in RATES:
            passed, dups, walls, asked, waited, kinds = 0, 0, [], [], [], {}
            for i in range(runs):
                faults.reset(rate, int(rate * 1000) * 1_000_003 + i)
                ok, dup, wall, why, w = one_run(binary, px_port, home)
                waited.append(w)
                if why:
                    failures.append(f"rate {rate} run {i}: {why}; faults {faults.injected}")
                passed += ok
                dups += dup
                walls.append(wall)
                asked.append(faults.asked_wait)
                for k in faults.injected:
                    kinds[k] = kinds.get(k, 0) + 1
            mix = ", ".join(f"{k} {kinds[k]}" for k in KINDS if k in kinds) or "none"
            print(f"| {rate} | {passed}/{runs} | {dups} | {statistics.median(walls):.2f} s "
                  f"| {statistics.median(waited):.2f} s | {statistics.median(asked):.1f} s | {mix} |",
                  flush=True)
        for failure in failures:
            print(failure)
    finally:
        up.shutdown()
        px.shutdown()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
