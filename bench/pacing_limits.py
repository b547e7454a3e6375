#!/usr/bin/env python3
"""Pacing where no limits are published (issue 44, SPEC 24): a fleet on one
key whose limit the server never tells.

Eight runs of a six-step task (five `bash true` tool calls, then an
answer: 6 requests a run, 48 in all), four on each of two simulated
machines (two state directories) sharing one redis-server record, all on
one key whose hidden limit is LIMIT requests a minute, refilling evenly from
a full bucket (so no client can finish the 48 requests in under
(48 - LIMIT) / LIMIT minutes: 60 s for 24). Two doors:

  bedrock  tests/fakes/bedrock.py --hidden-limit LIMIT: a refusal is a 429
           `ThrottlingException` with no Retry-After, no headers ever
  openai   an OpenAI-compatible stub here: a refusal is a plain 429
           `rate_limit_exceeded`, no headers ever

and two configurations each:

  learned   no `limits` at all: the fleet learns the limit from refusals
  declared  `limits: [{model: "<provider>/*", requests: LIMIT}]`

Reported per scenario and repeat: refusals the server sent (from its log),
requests received, exit codes, and the makespan (first start to last end)
against the floor; then medians over REPEAT.

Run:  python3 bench/pacing_limits.py
      TINYAGENT=target/release/tinyagent REPEAT=3 DOORS=bedrock,openai MODES=learned,declared python3 bench/pacing_limits.py
(needs redis-server; builds the debug binary unless TINYAGENT is set: the
run is paced by the limit, not by the binary's speed).
"""
import http.server, json, os, shutil, socket, statistics, subprocess, sys
import tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = int(os.environ.get("LIMIT", "24"))
RUNS_PER_MACHINE = 4
STEPS = 6
REPEAT = int(os.environ.get("REPEAT", "1"))
DOORS = os.environ.get("DOORS", "bedrock,openai").split(",")
MODES = os.environ.get("MODES", "learned,declared").split(",")
BEDROCK_MODEL = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_redis():
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


class Bucket:
    """LIMIT a minute, refilling evenly from full."""
    def __init__(self):
        self.lock = threading.Lock()
        self.level = float(LIMIT)
        self.at = time.monotonic()

    def admit(self):
        with self.lock:
            now = time.monotonic()
            self.level = min(LIMIT, self.level + (now - self.at) * LIMIT / 60.0)
            self.at = now
            if self.level >= 1:
                self.level -= 1
                return True
            return False


def openai_stub(log):
    bucket = Bucket()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            ok = bucket.admit()
            with open(log, "a") as f:
                f.write(json.dumps({"at": time.time(), "throttled": not ok}) + "\n")
            if not ok:
                data = json.dumps({"error": {"message": "Rate limit reached for requests",
                                             "type": "requests", "code": "rate_limit_exceeded"}}).encode()
                self.send_response(429)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            if turns < STEPS - 1:
                delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": f"call_{turns}", "type": "function",
                         "function": {"name": "bash", "arguments": json.dumps({"command": "true"})}}]}
                finish = "tool_calls"
            else:
                delta = {"role": "assistant", "content": "done"}
                finish = "stop"
            chunks = [
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}},
            ]
            data = "".join("data: " + json.dumps(dict(c, id="x", object="chat.completion.chunk", created=0, model="m")) + "\n\n"
                           for c in chunks) + "data: [DONE]\n\n"
            data = data.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def bedrock_fake(tmp, log):
    script = os.path.join(tmp, "script.json")
    replies = [{"tool_use": [{"name": "bash", "id": f"tooluse_{i}", "input": {"command": "true"}}]}
               for i in range(STEPS - 1)] + [{"text": "done"}]
    with open(script, "w") as f:
        json.dump({"replies": replies, "by_turn": True}, f)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/fakes/bedrock.py"), "--port", "0", "--log", log,
         "--script", script, "--hidden-limit", str(LIMIT)],
        stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    return proc, port


def scenario(binary, door, mode, redis_port):
    tmp = tempfile.mkdtemp(prefix="tinyagent-bench-limits-")
    log = os.path.join(tmp, "requests.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC", "AWS_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "NO_COLOR": "1"})
    if door == "bedrock":
        fake, port = bedrock_fake(tmp, log)
        env.update({"AWS_ACCESS_KEY_ID": "AKIDTINYAGENTFAKE", "AWS_SECRET_ACCESS_KEY": "tinyagent/fake/secret+key",
                    "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": f"http://127.0.0.1:{port}"})
        model, glob, providers = BEDROCK_MODEL, "bedrock/*", ""
    else:
        fake = openai_stub(log)
        port = fake.server_address[1]
        env["GW_KEY"] = "sk-bench-shared"
        model, glob = "gw/m", "gw/*"
        providers = f"providers:\n  gw: {{api: openai, endpoint: http://127.0.0.1:{port}/v1, api_key_env: GW_KEY}}\n"
    config = f"health_db: redis://127.0.0.1:{redis_port}/0\n{providers}"
    if mode == "declared":
        config += f'limits: [{{model: "{glob}", requests: {LIMIT}}}]\n'
    procs = []
    start = time.monotonic()
    for machine in range(2):
        home = os.path.join(tmp, f"machine{machine}")
        os.makedirs(os.path.join(home, ".config/tinyagent"))
        os.makedirs(os.path.join(home, "work"))
        with open(os.path.join(home, ".config/tinyagent/config.yaml"), "w") as f:
            f.write(config)
        menv = dict(env, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
                    XDG_STATE_HOME=os.path.join(home, ".local/state"))
        for _ in range(RUNS_PER_MACHINE):
            procs.append(subprocess.Popen([binary, "-q", "--no-save", "-m", model, "--log-db",
                                           os.path.join(home, f"log{len(procs)}.db"), "go"], env=menv,
                                          cwd=os.path.join(home, "work"), stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
    results = [(p.wait(), p.stderr.read()) for p in procs]
    makespan = time.monotonic() - start
    if door == "bedrock":
        fake.kill()
        fake.wait()
    else:
        fake.shutdown()
    with open(log) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    refusals = sum(1 for l in lines if l["throttled"])
    learned = sum(r[1].count("rate limit learned") for r in results)
    if os.environ.get("KEEP"):
        for i, (_, err) in enumerate(results):
            with open(os.path.join(tmp, f"stderr{i}.txt"), "w") as f:
                f.write(err)
        print(f"  kept {tmp}", flush=True)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"refusals": refusals, "requests": len(lines), "makespan": makespan,
            "exits": sorted(set(r[0] for r in results)), "learned_lines": learned}


def main():
    binary = os.environ.get("TINYAGENT")
    if not binary:
        subprocess.run(["cargo", "build", "--quiet"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target/debug/tinyagent")
    binary = os.path.abspath(binary)
    floor = (RUNS_PER_MACHINE * 2 * STEPS - LIMIT) / LIMIT * 60
    print(f"{RUNS_PER_MACHINE * 2} runs x {STEPS} requests, hidden limit {LIMIT}/min from a full bucket: floor {floor:.0f} s")
    redis, redis_port = start_redis()
    try:
        for door in DOORS:
            for mode in MODES:
                rows = []
                for i in range(REPEAT):
                    subprocess.run(["redis-cli", "-p", str(redis_port), "FLUSHALL"], stdout=subprocess.DEVNULL)
                    r = scenario(binary, door, mode, redis_port)
                    rows.append(r)
                    print(f"  {door:8} {mode:9} #{i + 1}: {r['refusals']:3} refusals / {r['requests']:3} requests, "
                          f"makespan {r['makespan']:6.1f} s ({r['makespan'] / floor:.2f}x floor), exits {r['exits']}, "
                          f"learned lines {r['learned_lines']}", flush=True)
                med = lambda k: statistics.median(r[k] for r in rows)
                print(f"{door:8} {mode:9} median: {med('refusals')} refusals, makespan {med('makespan'):.1f} s "
                      f"({med('makespan') / floor:.2f}x floor)", flush=True)
    finally:
        redis.kill()


if __name__ == "__main__":
    main()
