#!/usr/bin/env python3
"""Interactive follow-up latency (SPEC 14 target: a follow-up's first request
within 50 ms of Enter, scripted model). Not a test.

Starts `tinyagent` (no TASK) on a pseudo-terminal the script makes (stdin and
stderr on the pty, stdout a pipe), types a task, then N follow-ups, and times
each from writing Enter to (a) the follow-up's request arriving at a loopback
OpenAI-compatible stub (model `openai/bench`), the figure the target is about,
and (b) with the scripted model, the answer line arriving on stdout, which
comes after the whole follow-up run (settings, run store, checkpoint, request,
reply) and so bounds the time to the first request from above. Prints medians
and 90th percentiles.

Run: python3 bench/interactive_latency.py [path/to/tinyagent] [N]
(default: target/release/tinyagent if built, else target/debug/tinyagent; N=30)
"""

import fcntl
import http.server
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import termios
import threading
import time

ARRIVALS = []


class Stub(http.server.BaseHTTPRequestHandler):
    """Chat Completions streaming, as OpenAI documents it: a role chunk, the
    text, a finish chunk, a usage chunk with no choices, `[DONE]`."""

    def do_POST(self):
        ARRIVALS.append(time.monotonic())
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        def chunk(delta, finish):
            return {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                    "created": 1750000000, "model": "bench",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        events = [chunk({"role": "assistant", "content": ""}, None),
                  chunk({"content": "the answer"}, None),
                  chunk({}, "stop"),
                  {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                   "created": 1750000000, "model": "bench", "choices": [],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}]
        body = "".join("data: %s\n\n" % json.dumps(e) for e in events) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def binary():
    if len(sys.argv) > 1:
        return sys.argv[1]
    for kind in ("release", "debug"):
        path = os.path.join("target", kind, "tinyagent")
        if os.path.exists(path):
            return path
    sys.exit("build tinyagent first (cargo build --release)")


def measure(exe, rounds, stub_url):
    """Enter-to-event times of `rounds` follow-ups, in ms."""
    tmp = tempfile.mkdtemp(prefix="ta-latency-")
    home = os.path.join(tmp, "home")
    work = os.path.join(tmp, "work")
    os.makedirs(home)
    os.makedirs(work)
    script = os.path.join(tmp, "answer.yaml")
    with open(script, "w") as f:
        f.write("- text: the answer\n")

    master, slave = pty.openpty()
    read_out, write_out = os.pipe()

    def child_setup():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=home, XDG_STATE_HOME=os.path.join(home, ".local/state"),
               XDG_CONFIG_HOME=os.path.join(home, ".config"), TERM="xterm", NO_COLOR="1")
    model = "script/" + script
    if stub_url:
        env.update(OPENAI_BASE_URL=stub_url, OPENAI_API_KEY="bench")
        model = "openai/bench"
    proc = subprocess.Popen([exe, "-m", model], cwd=work, env=env,
                            stdin=slave, stdout=write_out, stderr=slave,
                            preexec_fn=child_setup, close_fds=True)
    os.close(slave)
    os.close(write_out)

    term = bytearray()
    answers = bytearray()

    def pump(until, timeout=20.0):
        """Reads both streams until `until()` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit("timed out; terminal so far: %r" % bytes(term[-400:]))
            ready, _, _ = select.select([master, read_out], [], [], left)
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                (term if fd == master else answers).extend(data)

    pump(lambda: term.endswith(b"> ") or b"> " in term[-20:])
    times = []
    for i in range(rounds + 1):
        seen_answers = answers.count(b"\n")
        seen_summaries = term.count(b"completed after")
        seen_requests = len(ARRIVALS)
        os.write(master, b"task %d\r" % i)
        start = time.monotonic()
        pump(lambda: answers.count(b"\n") > seen_answers)
        end = ARRIVALS[seen_requests] if stub_url else time.monotonic()
        if i > 0:
            times.append((end - start) * 1000)
        pump(lambda: term.count(b"completed after") > seen_summaries
             and b"> " in term[term.rfind(b"completed after"):])
    os.write(master, b"exit\r")
    proc.wait(timeout=10)
    return sorted(times)


def report(what, ms):
    print("%s: %d follow-ups, median %.1f ms, p90 %.1f ms, max %.1f ms"
          % (what, len(ms), statistics.median(ms), ms[int(len(ms) * 0.9) - 1], ms[-1]))


def main():
    exe = os.path.abspath(binary())
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/v1" % server.server_address[1]
    print("binary: %s" % exe)
    report("Enter to first request (loopback stub)", measure(exe, rounds, url))
    report("Enter to answer on stdout (scripted model)", measure(exe, rounds, None))
    server.shutdown()


if __name__ == "__main__":
    main()
