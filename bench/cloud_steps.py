#!/usr/bin/env python3
"""A 10-step tool task through each cloud's loopback fake, against the same
task through an Anthropic Messages stub (issue 35, SPEC 22's target: each
within 1.2x of Anthropic).

Each run is one tinyagent process (release build) doing STEPS steps: a
`list_files` call at every step but the last, then a text answer. The
clouds are the fakes of tests/fakes/ (bedrock.py checks every SigV4
signature in Python, vertex.py serves a token endpoint and Claude on
`:streamRawPredict` and Gemini on `:streamGenerateContent`, gemini.py the
Gemini API, azure.py Azure OpenAI's Chat Completions). Like the stub, each
fake sends a whole reply in one write with its length, keeps the connection
and sets TCP_NODELAY, so that the figures compare the protocols rather than
the servers' manners; the Anthropic baseline is the stub of bench/providers-steps.py,
in this process. A fake is started afresh, outside the timing, for every
run, since its script is consumed as the run goes.

Two figures per door, each the median over RUNS:
  * wall: the whole run as a user waits for it (it includes the fake's own
    time, and the Python fakes are slower than the stub: an upper bound on
    what the cloud's protocol costs tinyagent);
  * cpu: tinyagent's own user+sys time (os.wait4 on its pid alone), which is
    what signing, framing and decoding cost.

Run: python3 bench/cloud_steps.py [--steps 10] [--runs 7] [--bin target/release/tinyagent]
  or: python3 bench/cloud_steps.py --serve DIR   (servers only, each door's
      command line in DIR/<door>.cmd, for a paired A/B timing harness)
Needs: cargo build --release; python3 with the standard library only.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEM = os.path.join(ROOT, "tests/fakes/fixtures/throwaway-service-account.pem")

spec = importlib.util.spec_from_file_location("providers_steps", os.path.join(ROOT, "bench/providers-steps.py"))
steps_stub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(steps_stub)


def bedrock_script(steps):
    call = {"text": "Looking.", "tool_use": [{"name": "list_files", "id": "tooluse_1", "input": {"path": "."}}]}
    replies = [dict(call, tool_use=[dict(call["tool_use"][0], id=f"tooluse_{i}")]) for i in range(steps - 1)]
    return {"replies": replies + [{"text": "done"}]}


def google_script(steps):
    call = {"text": "Looking.", "calls": [{"name": "list_files", "args": {"path": "."}}]}
    return [call] * (steps - 1) + [{"text": "done"}]


def start_fake(name, work, script, by_turn=False, tag=None):
    tag = tag or name
    path = os.path.join(work, f"{tag}-script.json")
    if by_turn:
        script = {"by_turn": True, "replies": script["replies"] if isinstance(script, dict) else script}
    with open(path, "w") as f:
        json.dump(script, f)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, f"tests/fakes/{name}.py"), "--port", "0",
         "--log", os.path.join(work, f"{tag}.log"), "--script", path],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def service_account(work, url):
    key = {"type": "service_account", "project_id": "bench", "private_key_id": "k1",
           "private_key": open(PEM).read(), "client_email": "bench@bench.iam.gserviceaccount.com",
           "client_id": "1", "token_uri": f"{url}/token"}
    path = os.path.join(work, f"sa-{url.rsplit(':', 1)[1]}.json")
    with open(path, "w") as f:
        json.dump(key, f)
    return path


def door(name, work, steps, stub_url, by_turn=False):
    """(model, env additions, fake process or None) for one run."""
    if name == "anthropic":
        steps_stub.Stub.steps = steps
        return "anthropic/claude-sonnet-4-5", {"ANTHROPIC_BASE_URL": stub_url, "ANTHROPIC_API_KEY": "k"}, None
    if name == "bedrock":
        proc, url = start_fake("bedrock", work, bedrock_script(steps), by_turn)
        return ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                {"AWS_ACCESS_KEY_ID": "AKIDTINYAGENTFAKE", "AWS_SECRET_ACCESS_KEY": "tinyagent/fake/secret+key",
                 "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url}, proc)
    if name == "azure":
        proc, url = start_fake("azure", work, google_script(steps), by_turn)
        return "azure/gpt-5", {"AZURE_OPENAI_ENDPOINT": url, "AZURE_OPENAI_API_KEY": "fake-azure-key"}, proc
    if name == "gemini":
        proc, url = start_fake("gemini", work, google_script(steps), by_turn)
        return "gemini/gemini-2.5-pro", {"GEMINI_API_KEY": "fake-gemini-key", "GEMINI_BASE_URL": f"{url}/v1beta"}, proc
    proc, url = start_fake("vertex", work, google_script(steps), by_turn, tag=name)
    model = "vertex/claude-sonnet-4-5@20250929" if name == "vertex-claude" else "vertex/gemini-2.5-pro"
    return model, {"VERTEX_BASE_URL": url, "CLOUD_ML_REGION": "us-east5",
                   "GOOGLE_APPLICATION_CREDENTIALS": service_account(work, url)}, proc


def base_env(work, extra):
    """The environment of one run: nothing of the developer's own clouds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_", "GEMINI_", "ANTHROPIC_", "VERTEX_"))}
    env.update(HOME=work, XDG_CONFIG_HOME=os.path.join(work, "cfg"), XDG_STATE_HOME=os.path.join(work, "state"),
               AWS_EC2_METADATA_DISABLED="true", GCE_METADATA_HOST="127.0.0.1:9",
               AWS_CONFIG_FILE=os.path.join(work, "none"), AWS_SHARED_CREDENTIALS_FILE=os.path.join(work, "none"),
               CLOUDSDK_CONFIG=os.path.join(work, "gcloud"), **extra)
    return env


def run_once(binary, name, work, steps, stub_url):
    model, extra, proc = door(name, work, steps, stub_url)
    env = base_env(work, extra)
    try:
        start = time.perf_counter()
        child = subprocess.Popen([binary, "-m", model, "-q", "--step-limit", str(steps + 5), "bench"],
                                 cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if proc:
            proc.kill()
            proc.wait()
    if child.returncode != 0:
        sys.exit(f"{name}: exit {child.returncode}: {stderr.decode()[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


def serve(work, steps, stub_url):
    """--serve DIR: every door's server started once, answering by turn (so
    each serves any number of runs), and for each door DIR/<door>.cmd, the
    whole command line of one run (`env VAR=... tinyagent ...`), to time
    with any harness, pair by pair; runs until interrupted."""
    os.makedirs(os.path.join(work, "cfg", "tinyagent"), exist_ok=True)
    with open(os.path.join(work, "cfg", "tinyagent", "config.yaml"), "w") as f:
        f.write("health_db: off\npacing: off\n")
    procs = []
    for d in DOORS:
        model, extra, proc = door(d, work, steps, stub_url, by_turn=True)
        if proc:
            procs.append(proc)
        env = base_env(work, extra)
        changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
        line = ["env"] + [f"{k}={v}" for k, v in sorted(changed.items())]
        line += [BIN_FOR_SERVE[0], "-m", model, "-q", "--step-limit", str(steps + 5), "bench"]
        with open(os.path.join(work, f"{d}.cmd"), "w") as f:
            f.write(" ".join(line) + "\n")
    print(f"serving {', '.join(DOORS)}; commands in {work}/<door>.cmd (run them from {work})", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            proc.kill()


BIN_FOR_SERVE = []
DOORS = ["anthropic", "bedrock", "vertex-claude", "vertex-gemini", "gemini", "azure"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--bin", default=os.path.join(ROOT, "target/release/tinyagent"))
    p.add_argument("--serve", metavar="DIR", help="start the servers and write each door's command into DIR")
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    server = ThreadingHTTPServer(("127.0.0.1", 0), steps_stub.Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stub_url = f"http://127.0.0.1:{server.server_port}"
    if a.serve:
        BIN_FOR_SERVE.append(a.bin)
        steps_stub.Stub.steps = a.steps
        return serve(os.path.abspath(a.serve), a.steps, stub_url)
    doors = DOORS
    results = {d: [] for d in doors}
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "cfg", "tinyagent"))
        with open(os.path.join(work, "cfg", "tinyagent", "config.yaml"), "w") as f:
            f.write("health_db: off\npacing: off\n")
        for d in doors:
            run_once(a.bin, d, work, a.steps, stub_url)  # warm-up
        for _ in range(a.runs):
            for d in doors:  # interleaved, so drift hits every door alike
                results[d].append(run_once(a.bin, d, work, a.steps, stub_url))
    base_wall = statistics.median(w for w, _ in results["anthropic"])
    base_cpu = statistics.median(c for _, c in results["anthropic"])
    print(f"{a.steps}-step tool task, median of {a.runs} runs each (release build)")
    print(f"{'door':<15}{'wall ms':>10}{'x anthropic':>13}{'cpu ms':>10}{'x anthropic':>13}")
    for d in doors:
        wall = statistics.median(w for w, _ in results[d])
        cpu = statistics.median(c for _, c in results[d])
        print(f"{d:<15}{wall * 1000:>10.1f}{wall / base_wall:>13.2f}{cpu * 1000:>10.1f}{cpu / base_cpu:>13.2f}")


if __name__ == "__main__":
    main()
