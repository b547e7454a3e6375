#!/usr/bin/env python3
"""Core benchmark (issue 2): startup and per-step agent overhead.

Measures, on the release binary:
  * `tinyagent --version`: median wall time and peak RSS over 50 runs;
  * a 200-step `script/` run whose every step calls `plan` (an in-process
    tool, so the time is the agent's own): wall time per step and peak RSS;
  * the same with `bash true` each step, for the cost of a real tool.
Run: python3 bench/core.py   (builds with `cargo build --release` first)
"""
import os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "tinyagent")


def run(args, cwd):
    """Wall time (s), peak RSS (MB, from GNU time: the binary alone) and exit code."""
    start = time.perf_counter()
    proc = subprocess.run([BIN] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    out = subprocess.run(["/usr/bin/time", "-f", "%M", BIN] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rss_kb = int(out.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024.0, proc.returncode


def script(path, steps, call):
    with open(path, "w") as f:
        f.write(f"- tool_calls:\n  - {call}\n  usage: {{input: 1000, output: 20}}\n  repeat: {steps - 1}\n")
        f.write("- tool_calls:\n  - {name: submit, arguments: {output: done}}\n")


def main():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp()
    env_cwd = tmp
    walls, rss = [], []
    for _ in range(50):
        w, r, _ = run(["--version"], env_cwd)
        walls.append(w); rss.append(r)
    print(f"--version: median {statistics.median(walls)*1000:.2f} ms, peak RSS {max(rss):.1f} MB")

    for label, call in [("plan", "{name: plan, arguments: {items: [{text: step, status: in_progress}]}}"),
                        ("bash true", "{name: bash, arguments: {command: 'true'}}")]:
        path = os.path.join(tmp, "s.yaml")
        script(path, 200, call)
        walls, rss = [], []
        for _ in range(7):
            w, r, code = run(["-m", f"script/{path}", "-q", "-o", os.path.join(tmp, "t.json"), "bench"], env_cwd)
            assert code == 0, code
            walls.append(w); rss.append(r)
        med = statistics.median(walls)
        print(f"200 steps ({label}, with -o): median {med*1000:.1f} ms total, {med/200*1000:.3f} ms/step, peak RSS {max(rss):.1f} MB")


if __name__ == "__main__":
    sys.exit(main())
