#!/usr/bin/env python3
"""Integrations benchmark (issue 7): what MCP servers, --sandbox and
--worktree cost, on the release binary, with offline `script/` models.

Measures (medians):
  * --sandbox setup: a one-step run with and without --sandbox;
  * a sandboxed `bash true`: 100 steps of it with and without --sandbox;
  * HTTP through the sandbox proxy: 20 downloads of a 4 MB file from a
    loopback server, sandboxed (allowing localhost) and not;
  * MCP: start-up of one server (the Python test server) and the cost of a
    tool call (100 steps of `mcp__t__echo` against 100 of `plan`);
  * --worktree: a one-step run in a fresh worktree against the plain run.
Run: python3 bench/integrations.py   (builds with `cargo build --release` first;
needs bwrap and curl for the sandbox rows)
"""
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "tinyagent")
SERVER = os.path.join(ROOT, "tests", "cli", "support", "mcp_server.py")


def run(args, cwd):
    start = time.perf_counter()
    proc = subprocess.run([BIN] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, (args, proc.stderr)
    return wall


def median_ms(args, cwd, n):
    return statistics.median(run(args, cwd) for _ in range(n)) * 1000


def script(path, steps, call):
    with open(path, "w") as f:
        if steps > 0:
            f.write(f"- tool_calls:\n  - {call}\n  usage: {{input: 1000, output: 20}}\n  repeat: {steps - 1}\n")
        f.write("- tool_calls:\n  - {name: submit, arguments: {output: done}}\n")
    return f"script/{path}"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp()
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    submit = script(os.path.join(tmp, "submit.yaml"), 0, "")
    have_sandbox = shutil.which("bwrap") and shutil.which("curl")

    plain = median_ms(["-m", submit, "-q", "t"], work, 20)
    print(f"baseline one-step run: {plain:.1f} ms")

    if have_sandbox:
        sandboxed = median_ms(["-m", submit, "-q", "--sandbox", "t"], work, 20)
        print(f"--sandbox setup (proxy + trial sandbox): +{sandboxed - plain:.1f} ms per run")

        true100 = script(os.path.join(tmp, "true.yaml"), 100, "{name: bash, arguments: {command: 'true'}}")
        a = median_ms(["-m", true100, "-q", "t"], work, 5)
        b = median_ms(["-m", true100, "-q", "--sandbox", "t"], work, 5)
        print(f"bash true: {a / 100:.2f} ms/step plain, {b / 100:.2f} ms/step sandboxed "
              f"(+{(b - a) / 100:.2f} ms per command)")

        blob_dir = os.path.join(tmp, "www")
        os.makedirs(blob_dir)
        with open(os.path.join(blob_dir, "blob"), "wb") as f:
            f.write(os.urandom(4 * 1024 * 1024))
        handler = lambda *a, **k: Quiet(*a, directory=blob_dir, **k)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
        fetch = script(os.path.join(tmp, "fetch.yaml"), 20,
                       f"{{name: bash, arguments: {{command: 'curl -sSf -o /dev/null http://localhost:{port}/blob'}}}}")
        a = median_ms(["-m", fetch, "-q", "t"], work, 5)
        b = median_ms(["-m", fetch, "-q", "--sandbox", "--sandbox-allow-domain", "localhost", "t"], work, 5)
        print(f"20 x 4 MB over loopback HTTP: {a:.0f} ms direct, {b:.0f} ms through the sandbox proxy "
              f"(+{(b - a) / 20:.1f} ms per download)")
        httpd.shutdown()
    else:
        print("sandbox rows skipped: bwrap or curl missing")

    cfg = os.path.join(tmp, "mcp.yaml")
    with open(cfg, "w") as f:
        f.write(f"mcp_servers:\n  t: {{command: {sys.executable}, args: [{SERVER}]}}\n")
    with_mcp = median_ms(["-c", cfg, "-m", submit, "-q", "t"], work, 20)
    print(f"MCP: one Python stdio server started, initialized and stopped: +{with_mcp - plain:.1f} ms per run")
    echo = script(os.path.join(tmp, "echo.yaml"), 100, "{name: mcp__t__echo, arguments: {text: hi}}")
    plan = script(os.path.join(tmp, "plan.yaml"), 100, "{name: plan, arguments: {items: [{text: a, status: done}]}}")
    a = median_ms(["-c", cfg, "-m", plan, "-q", "t"], work, 5)
    b = median_ms(["-c", cfg, "-m", echo, "-q", "t"], work, 5)
    print(f"MCP tool call: +{(b - a) / 100:.3f} ms per call over an in-process tool")

    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    git = ["git", "-C", repo, "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run(git + ["init", "-q"], check=True)
    for i in range(200):
        with open(os.path.join(repo, f"f{i}.txt"), "w") as f:
            f.write("x" * 1000)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    base = median_ms(["-m", submit, "-q", "t"], repo, 10)
    walls = [run(["-m", submit, "-q", "--worktree", f"bench{i}", "t"], repo) * 1000 for i in range(10)]
    print(f"--worktree (200-file repository): +{statistics.median(walls) - base:.1f} ms per run")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
