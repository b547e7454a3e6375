"""Judges one compatibility run from its `--json` events.

Usage: verdict.py EVENTS.jsonl EXIT_CODE [model|loop]

Prints `PASS <details>` or `FAIL <why>; <details>`. A run passes when its
stream has one run.started (first) and one run.finished (last), it did not
end in error, it got at least two model responses and ran at least one tool,
and no response has 0 input or output tokens. `loop` runs (a mock model that
always calls bash) must end at their step limit.
"""

import json
import sys


def main() -> None:
    path, code = sys.argv[1], int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "model"
    events = []
    problems = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                events.append(json.loads(line))
            except ValueError:
                problems.append(f"line {n} is not JSON")
    types = [e.get("type") for e in events]
    end = events[-1] if events else {}
    if types.count("run.started") != 1 or types[:1] != ["run.started"]:
        problems.append("not exactly one run.started first")
    if types.count("run.finished") != 1 or types[-1:] != ["run.finished"]:
        problems.append("not exactly one run.finished last")
    responses = [e for e in events if e.get("type") == "model.response"]
    tools = [e for e in events if e.get("type") == "tool.finished"]
    status = end.get("status")
    if status == "error" or code == 1 or code == 75:
        problems.append(f"error: {end.get('error')}")
    if mode == "loop" and status != "step_limit":
        problems.append(f"status {status}, expected step_limit")
    if len(responses) < 2:
        problems.append(f"{len(responses)} model responses")
    if not tools:
        problems.append("no tool ran")
    zero = [r for r in responses if not r.get("input_tokens") or not r.get("output_tokens")]
    if zero:
        problems.append(f"{len(zero)} responses with 0 tokens")
    estimated = any(r.get("usage_estimated") for r in responses)
    details = (
        f"status={status} exit={code} steps={end.get('steps')} "
        f"tokens={end.get('input_tokens')}/{end.get('output_tokens')}"
        f"{' (estimated)' if estimated else ''} "
        f"tools={','.join(t.get('tool', '?') + ('' if t.get('ok') else '!') for t in tools)}"
    )
    if problems:
        print(f"FAIL {'; '.join(problems)}; {details}")
    else:
        print(f"PASS {details}")


if __name__ == "__main__":
    main()
