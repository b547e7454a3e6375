#!/usr/bin/env bash
# The fleet drill for the shared provider health record (SPEC section 13):
# RUNS runs started together, the primary failing with 503 forever, the
# fallback healthy, default retry settings (6 attempts, 500ms backoff doubling,
# jitter 0.5). Reports the requests the dead primary received in total and
# the median time from each run's start to its first answer, with the shared
# record (fresh, and already knowing the outage) and with `health_db: off`.
# Then the per-request cost of the record (cargo bench --bench health_read).
#
# Usage: bench/health.sh            (after cargo build --release)
#        RUNS=8 REPEAT=3 TINYAGENT=target/release/tinyagent bench/health.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TINYAGENT:-target/release/tinyagent}
RUNS=${RUNS:-8}
REPEAT=${REPEAT:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home"
printf -- '- error: {status: 503}\n' > "$work/dead.yaml"
printf -- '- tool_calls:\n  - {name: submit, arguments: {output: done}}\n' > "$work/ok.yaml"
printf 'health_db: off\n' > "$work/off.yaml"
: > "$work/shared.yaml"

# fleet <label> <config> <state dir>: starts RUNS runs at once, waits for all.
fleet() {
  local label=$1 config=$2 state=$3 i
  mkdir -p "$work/out/$label"
  for i in $(seq 1 "$RUNS"); do
    env -i PATH="$PATH" HOME="$work/home" XDG_STATE_HOME="$state" TINYAGENT_CONFIG="$config" \
      "$BIN" --json -m "script/$work/dead.yaml" --fallback-model "script/$work/ok.yaml" "fleet drill" \
      > "$work/out/$label/run-$i.jsonl" 2>/dev/null < /dev/null &
  done
  wait
}

for r in $(seq 1 "$REPEAT"); do
  fleet "shared-cold-$r" "$work/shared.yaml" "$work/state-$r"
  fleet "shared-warm-$r" "$work/shared.yaml" "$work/state-$r"
  fleet "off-$r" "$work/off.yaml" "$work/state-off"
done

python3 - "$work/out" "$RUNS" <<'PY'
import json, os, statistics, sys
from datetime import datetime
root, runs = sys.argv[1], int(sys.argv[2])
def ts(e): return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()
rows = {}
for label in sorted(os.listdir(root)):
    mode = label.rsplit("-", 1)[0]
    requests, firsts = 0, []
    for f in os.listdir(os.path.join(root, label)):
        ev = [json.loads(l) for l in open(os.path.join(root, label, f)) if l.strip()]
        start = next(e for e in ev if e["type"] == "run.started")
        answer = next(e for e in ev if e["type"] == "model.response")
        # Requests to the dead primary: the attempts of the switch away from it.
        requests += sum(e["attempts"] for e in ev if e["type"] == "model.fallback")
        firsts.append(ts(answer) - ts(start))
    rows.setdefault(mode, []).append((requests, statistics.median(firsts), max(firsts)))
names = {"shared-cold": "shared record, outage new", "shared-warm": "shared record, outage known",
         "off": "health_db: off"}
print(f"fleet drill: {runs} concurrent runs, primary 503 forever, fallback healthy, default retry settings")
print(f"{'mode':30} {'primary requests':>17} {'median to 1st answer':>21} {'slowest run':>12}")
for mode in ["shared-cold", "shared-warm", "off"]:
    r = rows.get(mode, [])
    if not r: continue
    req = statistics.median(x[0] for x in r)
    med = statistics.median(x[1] for x in r)
    slow = statistics.median(x[2] for x in r)
    print(f"{names[mode]:30} {req:>17.0f} {med:>20.2f}s {slow:>11.2f}s")
print(f"(medians over {len(rows.get('off', []))} repetitions; without sharing each run alone pays {6} requests)")
PY

echo
echo "per-request cost of the record:"
cargo bench --offline --quiet --bench health_read 2>/dev/null || cargo bench --quiet --bench health_read
