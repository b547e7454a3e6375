#!/usr/bin/env python3
"""What prompt caching saves on each door (issue 45, SPEC 25).

A 20-step tool task whose context grows past 40k tokens (each step a `bash`
call printing ~8 KB, then an answer), run by tinyagent against each door's
loopback fake (tests/fakes/), which simulates the vendor's prompt cache
(tests/fakes/prompt_cache.py: per model and key, lifetimes, minimum sizes,
the longest breakpoint prefix) and reports its usage as the vendor does.

Per door, the input cost of steps 2-20 relative to the same tokens
uncached: (uncached + reads x read price + writes x write price) / (all
input x input price), at the vendor's published prices for that door
(PRICES below). Targets: <= 0.25 on the Anthropic API, Bedrock and Vertex;
<= 0.60 on OpenAI, Azure and Gemini.

Then the outage: the same task on anthropic/claude-sonnet-4-5 with
Bedrock's Claude Sonnet 4.5 as its fallback, the Anthropic fake failing
(HTTP 529) from step 10 on; the whole run's cost against the same run with
no outage. Target <= 1.50 (one cold write of the whole prompt on the new
door is unavoidable: about 1.38 at best).

Token counts come from each `model.response` event when it carries the
cache fields (`cached_input_tokens`, `cache_write_tokens`); else from the
usage the fake answered (`FILE.usage`), which is what the vendor bills.
`--no-cache` runs with `prompt_cache: off` (what tinyagent asked before).

Run: python3 bench/prompt_cache.py [--bin target/debug/tinyagent] [--steps 20] [--no-cache]
Needs: a tinyagent build; python3 with the standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKES = os.path.join(ROOT, "tests/fakes")
AKID, SECRET = "AKIDTINYAGENTFAKE", "tinyagent/fake/secret+key"
PEM = os.path.join(FAKES, "fixtures/throwaway-service-account.pem")

# USD per million tokens: input, cache read, cache write (5 minutes), as
# each vendor publishes them for that door. OpenAI, Azure and Gemini charge
# nothing extra to write their implicit caches.
PRICES = {
    "anthropic": (3.00, 0.30, 3.75),   # Claude Sonnet 4.5, Anthropic API
    "bedrock": (3.00, 0.30, 3.75),     # Claude Sonnet 4.5, Bedrock (global profile)
    "vertex": (3.00, 0.30, 3.75),      # Claude Sonnet 4.5, Vertex AI (global)
    "openai": (1.25, 0.125, 1.25),     # GPT-5, OpenAI
    "azure": (1.25, 0.125, 1.25),      # GPT-5, Azure OpenAI (global standard)
    "gemini": (0.30, 0.03, 0.30),      # Gemini 2.5 Flash, Gemini API
}
OUTPUT = {"anthropic": 15.0, "bedrock": 15.0, "vertex": 15.0, "openai": 10.0, "azure": 10.0, "gemini": 2.50}


def replies(steps, style):
    """`steps - 1` tool calls, each printing ~8 KB, then an answer."""
    out = []
    for i in range(steps - 1):
        command = f"seq {10000 + i * 2000} {10000 + i * 2000 + 1400}"
        if style == "bedrock":
            out.append({"text": f"Step {i}.", "tool_use": [{"name": "bash", "id": f"tooluse_{i}", "input": {"command": command}}]})
        else:
            out.append({"text": f"Step {i}.", "calls": [{"name": "bash", "args": {"command": command}}]})
    out.append({"text": "All done."})
    return out


class Fake:
    def __init__(self, name, workdir, script, *args):
        self.log = os.path.join(workdir, f"{name}.jsonl")
        path = os.path.join(workdir, f"{name}-script.json")
        with open(path, "w") as f:
            json.dump(script, f)
        self.proc = subprocess.Popen([sys.executable, os.path.join(FAKES, f"{name}.py"), "--port", "0", "--log", self.log,
                                      "--script", path, *args], stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def usages(self):
        try:
            with open(self.log + ".usage") as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def vertex_credentials(workdir, url):
    key = {"type": "service_account", "project_id": "bench", "private_key_id": "k1", "private_key": open(PEM).read(),
           "client_email": "bench@bench.iam.gserviceaccount.com", "client_id": "1", "token_uri": f"{url}/token"}
    path = os.path.join(workdir, "sa.json")
    with open(path, "w") as f:
        json.dump(key, f)
    return path


def door(name, steps, workdir):
    """(model spec, fake, environment) for one door."""
    if name == "anthropic":
        fake = Fake("anthropic", workdir, {"by_turn": True, "replies": replies(steps, "anthropic")}, "--key", "k")
        return "anthropic/claude-sonnet-4-5", fake, {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "k"}
    if name == "bedrock":
        fake = Fake("bedrock", workdir, {"by_turn": True, "replies": replies(steps, "bedrock")})
        return ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", fake,
                {"AWS_ACCESS_KEY_ID": AKID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": fake.url})
    if name == "vertex":
        fake = Fake("vertex", workdir, {"by_turn": True, "replies": replies(steps, "vertex")})
        return ("vertex/claude-sonnet-4-5@20250929", fake,
                {"GOOGLE_APPLICATION_CREDENTIALS": vertex_credentials(workdir, fake.url), "GOOGLE_CLOUD_PROJECT": "bench",
                 "GOOGLE_CLOUD_LOCATION": "us-east5", "VERTEX_BASE_URL": fake.url})
    if name in ("openai", "azure"):
        fake = Fake(name, workdir, {"by_turn": True, "replies": replies(steps, name)}, "--key", "k")
        if name == "openai":
            return "openai/gpt-5", fake, {"OPENAI_BASE_URL": f"{fake.url}/v1", "OPENAI_API_KEY": "k"}
        return "azure/gpt-5", fake, {"AZURE_OPENAI_ENDPOINT": fake.url, "AZURE_OPENAI_API_KEY": "k"}
    fake = Fake("gemini", workdir, {"by_turn": True, "replies": replies(steps, "gemini")}, "--key", "k")
    return "gemini/gemini-2.5-flash", fake, {"GEMINI_BASE_URL": f"{fake.url}/v1beta", "GEMINI_API_KEY": "k"}


def run(binary, workdir, env, args, config):
    home = os.path.join(workdir, "home")
    os.makedirs(os.path.join(home, ".config/tinyagent"), exist_ok=True)
    with open(os.path.join(home, ".config/tinyagent/config.yaml"), "w") as f:
        f.write("health_db: off\nsave_runs: false\npacing: off\n" + config)
    work = os.path.join(workdir, "work")
    os.makedirs(work, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    base.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"), XDG_STATE_HOME=os.path.join(home, ".state"),
                AWS_EC2_METADATA_DISABLED="true", GCE_METADATA_HOST="127.0.0.1:9", **env)
    out = subprocess.run([binary, *args, "--json", "--step-limit", "40", "go"], cwd=work, env=base,
                         capture_output=True, text=True, timeout=600)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0:
        sys.exit(f"tinyagent exited {out.returncode}: {out.stderr[-2000:]}")
    return [e for e in events if e.get("type") == "model.response"]


def read_write(name, usage):
    """(all input, read, written) from a vendor's usage."""
    if name in ("anthropic", "vertex"):
        read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        return usage["input_tokens"] + read + written, read, written
    if name == "bedrock":
        read, written = usage.get("cacheReadInputTokens", 0), usage.get("cacheWriteInputTokens", 0)
        return usage["inputTokens"] + read + written, read, written
    if name in ("openai", "azure"):
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        return usage.get("prompt_tokens", usage.get("input_tokens")), details.get("cached_tokens", 0), 0
    return usage["promptTokenCount"], usage.get("cachedContentTokenCount", 0), 0


def steps_of(name, responses, fake):
    """Per step (all input, read, written, output): from the events when
    they carry the cache fields, else from the fake's usage."""
    if responses and all("cache_write_tokens" in r for r in responses):
        return [(r["input_tokens"], r.get("cached_input_tokens", 0), r["cache_write_tokens"], r["output_tokens"])
                for r in responses], "events"
    usages = fake.usages()
    return [read_write(name, u) + (r["output_tokens"],) for u, r in zip(usages, responses)], "fake"


def input_cost(name, total, read, written):
    price, read_price, write_price = PRICES[name]
    return ((total - read - written) * price + read * read_price + written * write_price) / 1e6


def cost(name, step):
    total, read, written, output = step
    return input_cost(name, total, read, written) + output * OUTPUT[name] / 1e6


def doors(binary, steps, config):
    print(f"| door | model | input tokens at step {steps} | input cost, steps 2-{steps}, vs uncached | target | source |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for name in PRICES:
        with tempfile.TemporaryDirectory(prefix=f"cache-{name}-") as workdir:
            spec, fake, env = door(name, steps, workdir)
            try:
                responses = run(binary, workdir, env, ["-m", spec], config)
                rows, source = steps_of(name, responses, fake)
            finally:
                fake.stop()
        later = rows[1:]
        cached = sum(input_cost(name, t, r, w) for t, r, w, _ in later)
        uncached = sum(input_cost(name, t, 0, 0) for t, _, _, _ in later)
        target = 0.25 if name in ("anthropic", "bedrock", "vertex") else 0.60
        print(f"| {name} | `{spec}` | {rows[-1][0]} | {cached / uncached:.2f} | <= {target:.2f} | {source} |")


def outage(binary, steps, config):
    total = {}
    for label in ("no outage", "outage at step 10"):
        with tempfile.TemporaryDirectory(prefix="cache-outage-") as workdir:
            primary = replies(steps, "anthropic")
            if label != "no outage":
                primary = primary[:9] + [{"http": 529}]
            a = Fake("anthropic", workdir, {"by_turn": True, "replies": primary}, "--key", "k")
            b = Fake("bedrock", workdir, {"by_turn": True, "replies": replies(steps, "bedrock")})
            env = {"ANTHROPIC_BASE_URL": a.url, "ANTHROPIC_API_KEY": "k", "AWS_ACCESS_KEY_ID": AKID,
                   "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": b.url}
            chain = config + ("retry: {attempts: 2, backoff: 1ms, max_backoff: 10ms, jitter: 0}\n"
                              "fallback: {switch_after: 1, cooldown: never}\n")
            try:
                responses = run(binary, workdir, env, ["-m", "anthropic/claude-sonnet-4-5", "--fallback-model",
                                                       "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"], chain)
                on_a = [r for r in responses if r["model"].startswith("anthropic/")]
                on_b = [r for r in responses if r["model"].startswith("bedrock/")]
                rows_a, _ = steps_of("anthropic", on_a, a)
                rows_b, _ = steps_of("bedrock", on_b, b)
            finally:
                a.stop()
                b.stop()
            total[label] = sum(cost("anthropic", s) for s in rows_a) + sum(cost("bedrock", s) for s in rows_b)
            print(f"| {label} | {len(on_a)} on Anthropic, {len(on_b)} on Bedrock | ${total[label]:.4f} |")
    print(f"\nOutage run / no-outage run: {total['outage at step 10'] / total['no outage']:.2f} (target <= 1.50)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "target/debug/tinyagent"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-cache", action="store_true", help="run with prompt_cache: off")
    args = parser.parse_args()
    config = "prompt_cache: off\n" if args.no_cache else ""
    started = time.time()
    doors(args.bin, args.steps, config)
    print()
    print("| run | steps | cost |")
    print("| --- | --- | ---: |")
    outage(args.bin, args.steps, config)
    print(f"\n({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
