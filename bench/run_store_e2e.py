#!/usr/bin/env python3
"""What keeping a run in the run store adds to its start and to its end, end
to end (SPEC 7; target: under 1 ms each). Not a test.

Runs the binary against a loopback OpenAI-compatible stub (`openai/bench`,
one streamed text reply), alternately kept in the store and with
`--no-save`, with a store already holding 100 runs, and times:

- start: from spawning the process to the model request arriving at the
  stub (settings, the store's directory and index, the first trajectory
  write, the request itself);
- end: from the stub sending the whole reply to the process having
  exited (the final trajectory write, the index update joined, the answer
  and the summary printed).

The store's cost is the difference of the medians, kept minus --no-save.
The stub waits `DELAY_MS` (default 20) before answering, as any real model
does, so work the run does while its first request is out is not counted
as start.

Run: python3 bench/run_store_e2e.py [path/to/tinyagent] [ROUNDS]
(default target/release/tinyagent, 200 rounds of each)
"""

import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

DELAY_MS = float(os.environ.get("DELAY_MS", "20"))
STATE = {"arrived": None, "sent": None}


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        STATE["arrived"] = time.monotonic()
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(DELAY_MS / 1000)

        def chunk(delta, finish):
            return {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                    "created": 1750000000, "model": "bench",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        events = [chunk({"role": "assistant", "content": ""}, None),
                  chunk({"content": "done"}, None),
                  chunk({}, "stop"),
                  {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                   "created": 1750000000, "model": "bench", "choices": [],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}]
        body = ("".join("data: %s\n\n" % json.dumps(e) for e in events)
                + "data: [DONE]\n\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        STATE["sent"] = time.monotonic()
        self.wfile.write(body)
        self.wfile.flush()

    def log_message(self, *args):
        pass


def one(exe, env, cwd, save):
    STATE["arrived"] = STATE["sent"] = None
    args = [exe, "-q", "-m", "openai/bench", "task"]
    if not save:
        args.insert(1, "--no-save")
    spawned = time.monotonic()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    proc.wait()
    exited = time.monotonic()
    if proc.returncode != 0 or STATE["sent"] is None:
        sys.exit("run failed (exit %s)" % proc.returncode)
    return (STATE["arrived"] - spawned) * 1000, (exited - STATE["sent"]) * 1000


def main():
    exe = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/tinyagent")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="ta-store-")
    home, work = os.path.join(tmp, "home"), os.path.join(tmp, "work")
    os.makedirs(os.path.join(home, ".config/tinyagent"))
    os.makedirs(work)
    with open(os.path.join(home, ".config/tinyagent/config.yaml"), "w") as f:
        f.write("health_db: off\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "XDG_STATE_HOME": os.path.join(home, ".local/state"),
           "XDG_CONFIG_HOME": os.path.join(home, ".config"), "NO_COLOR": "1",
           "OPENAI_API_KEY": "bench",
           "OPENAI_BASE_URL": "http://127.0.0.1:%d/v1" % server.server_address[1]}
    for _ in range(100):
        one(exe, env, work, True)
    kept, unsaved = ([], []), ([], [])
    for _ in range(rounds):
        for save, into in ((True, kept), (False, unsaved)):
            start, end = one(exe, env, work, save)
            into[0].append(start)
            into[1].append(end)
    server.shutdown()
    print("binary: %s; %d rounds each; stub delay %.0f ms; store of 100+ runs" % (exe, rounds, DELAY_MS))
    for i, what in enumerate(("start (spawn to request)", "end (reply sent to exit)")):
        k, u = statistics.median(kept[i]), statistics.median(unsaved[i])
        print("%-26s kept median %.2f ms, --no-save median %.2f ms: the store adds %+.2f ms"
              % (what, k, u, k - u))


if __name__ == "__main__":
    main()
