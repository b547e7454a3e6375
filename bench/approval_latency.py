#!/usr/bin/env python3
"""Approval question latency (SPEC 20 target: the question appears within
20 ms of the model's reply being complete). Not a test.

Starts `tinyagent -i TASK` (an interactive session: approvals ask) on a
pseudo-terminal the script makes (stdin and stderr on the pty, stdout a
pipe), against a loopback OpenAI-compatible stub (model `openai/bench`)
whose every reply is a streamed `bash` tool call, each with a different
command. For each of N questions it times the span from the stub's last
byte of the reply (written and flushed) to the question's prompt (`› `)
arriving on the pty, then declines with Enter, which sends the next
request. Prints the median, 90th percentile and maximum.

With --what bash or --what edit the call is a `bash` command (default) or
an `edit_file` of a 200-line file (the question then carries a diff).

Run: python3 bench/approval_latency.py [path/to/tinyagent] [N] [--what edit]
(default: target/release/tinyagent if built, else target/debug/tinyagent; N=50)
"""

import fcntl
import http.server
import json
import os
import pty
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import termios
import threading
import time

SENT = []
WHAT = "bash"


def chunk(delta, finish):
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
            "created": 1750000000, "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def tool_call(n):
    if WHAT == "edit":
        name = "edit_file"
        args = {"path": "notes.txt", "old_string": "line %d\n" % (n % 200),
                "new_string": "line %d, changed %d\n" % (n % 200, n)}
    else:
        name = "bash"
        args = {"command": "echo step %d > /dev/null" % n}
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_%d" % n, "type": "function",
             "function": {"name": name, "arguments": ""}}]}, None),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(args)}}]}, None),
        chunk({}, "tool_calls"),
        {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1750000000,
         "model": "bench", "choices": [],
         "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}},
    ]


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Without this, Nagle's algorithm holds the body back until the
        # client's delayed ACK of the headers: about 40 ms per reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = "".join("data: %s\n\n" % json.dumps(e) for e in tool_call(len(SENT)))
        data = (body + "data: [DONE]\n\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        SENT.append(time.monotonic())

    def log_message(self, *args):
        pass


def binary(args):
    if args:
        return args[0]
    for kind in ("release", "debug"):
        path = os.path.join("target", kind, "tinyagent")
        if os.path.exists(path):
            return path
    sys.exit("build tinyagent first (cargo build --release)")


def measure(exe, rounds, url):
    tmp = tempfile.mkdtemp(prefix="ta-approval-")
    home = os.path.join(tmp, "home")
    work = os.path.join(tmp, "work")
    os.makedirs(home)
    os.makedirs(work)
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write("".join("line %d\n" % i for i in range(200)))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x50\x00\x00\x00\x00\x00")  # 24x80
    read_out, write_out = os.pipe()

    def child_setup():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=home, XDG_STATE_HOME=os.path.join(home, ".local/state"),
               XDG_CONFIG_HOME=os.path.join(home, ".config"), TERM="xterm", NO_COLOR="1",
               OPENAI_BASE_URL=url, OPENAI_API_KEY="bench")
    proc = subprocess.Popen([exe, "-m", "openai/bench", "-i", "the task"], cwd=work, env=env,
                            stdin=slave, stdout=write_out, stderr=slave,
                            preexec_fn=child_setup, close_fds=True)
    os.close(slave)
    os.close(write_out)
    term = bytearray()
    prompt = "› ".encode()

    def wait_for_prompt(seen, timeout=20.0):
        """Reads the terminal until a new prompt; returns when it arrived."""
        deadline = time.monotonic() + timeout
        while term.count(prompt) <= seen:
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit("timed out; terminal so far: %r" % bytes(term[-400:]))
            ready, _, _ = select.select([master, read_out], [], [], left)
            now = time.monotonic()
            for fd in ready:
                data = os.read(fd, 65536)
                if fd == master:
                    term.extend(data)
        return now

    times = []
    for i in range(rounds):
        arrived = wait_for_prompt(i)
        times.append((arrived - SENT[i]) * 1000)
        os.write(master, b"\r")  # Enter alone declines; the run goes on
    os.write(master, b"\x03")  # Ctrl-C at the last question: back to the prompt
    deadline = time.monotonic() + 10
    while b"interrupted after" not in term and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            term.extend(os.read(master, 65536))
    os.write(master, b"exit\r")
    proc.wait(timeout=10)
    return sorted(times)


def main():
    global WHAT
    args = sys.argv[1:]
    if "--what" in args:
        at = args.index("--what")
        WHAT = args[at + 1]
        del args[at:at + 2]
    exe = os.path.abspath(binary(args[:1]))
    rounds = int(args[1]) if len(args) > 1 else 50
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/v1" % server.server_address[1]
    ms = measure(exe, rounds, url)
    print("binary: %s" % exe)
    print("last reply byte to the %s question on the pty: %d questions, median %.1f ms, "
          "p90 %.1f ms, max %.1f ms"
          % (WHAT, len(ms), statistics.median(ms), ms[int(len(ms) * 0.9) - 1], ms[-1]))
    server.shutdown()


if __name__ == "__main__":
    main()
