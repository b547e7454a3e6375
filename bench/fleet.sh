#!/usr/bin/env bash
# The fleet drill for the health record in Redis (SPEC section 13, "Across
# machines"): RUNS runs on each of two simulated machines (own HOME and
# XDG_STATE_HOME each) started together, the primary failing with 503
# forever, chain [B] healthy, default retry settings. Reports the requests
# the dead primary received in total and whether every run finished on B:
#   - with `health_db: redis://…` (one loopback redis-server, persistence off)
#   - with `health_db: off` (each run alone)
#   - with Redis stopped 150 ms into the drill
# then the cost of one Redis operation on loopback (cargo bench health_read).
#
# Usage: bench/fleet.sh              (after cargo build --release; needs redis-server)
#        RUNS=8 REPEAT=3 TINYAGENT=target/release/tinyagent bench/fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TINYAGENT:-target/release/tinyagent}
RUNS=${RUNS:-8}
REPEAT=${REPEAT:-3}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis_pid=
start_redis() {
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pid=$!
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.02; done
}
stop_redis() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null; redis_pid=; }
trap 'stop_redis; rm -rf "$work"' EXIT
printf -- '- error: {status: 503}\n' > "$work/dead.yaml"
printf -- '- tool_calls:\n  - {name: submit, arguments: {output: done}}\n' > "$work/ok.yaml"
printf 'health_db: off\n' > "$work/off.yaml"
printf 'health_db: redis://127.0.0.1:%s/0\n' "$port" > "$work/redis.yaml"

# drill <label> <config> [stop-redis-after-seconds]: 2 machines x RUNS runs.
drill() {
  local label=$1 config=$2 stop_after=${3:-} m i
  mkdir -p "$work/out/$label"
  for m in a b; do
    mkdir -p "$work/$label/$m"
    for i in $(seq 1 "$RUNS"); do
      env -i PATH="$PATH" HOME="$work/$label/$m" XDG_STATE_HOME="$work/$label/$m/state" TINYAGENT_CONFIG="$config" \
        "$BIN" --json -m "script/$work/dead.yaml" --fallback-model "script/$work/ok.yaml" "fleet drill" \
        > "$work/out/$label/$m-$i.jsonl" 2>/dev/null < /dev/null &
    done
  done
  if [ -n "$stop_after" ]; then sleep "$stop_after"; stop_redis; fi
  wait $(jobs -p | grep -v "^${redis_pid:-x}$") 2>/dev/null || true
}

for r in $(seq 1 "$REPEAT"); do
  start_redis
  redis-cli -p "$port" flushall >/dev/null
  drill "redis-$r" "$work/redis.yaml"
  stop_redis
  drill "off-$r" "$work/off.yaml"
  start_redis
  redis-cli -p "$port" flushall >/dev/null
  drill "stopped-$r" "$work/redis.yaml" 0.15
  stop_redis
done

python3 - "$work/out" "$RUNS" <<'PY'
import json, os, statistics, sys
root, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for label in sorted(os.listdir(root)):
    mode = label.rsplit("-", 1)[0]
    requests, on_b, total = 0, 0, 0
    for f in os.listdir(os.path.join(root, label)):
        ev = [json.loads(l) for l in open(os.path.join(root, label, f)) if l.strip()]
        end = ev[-1]
        total += 1
        on_b += end["type"] == "run.finished" and end["status"] == "submitted" and end["active_model"].endswith("ok.yaml")
        requests += sum(e["attempts"] for e in ev if e["type"] == "model.fallback")
    rows.setdefault(mode, []).append((requests, on_b, total))
names = {"redis": "health_db: redis (shared)", "off": "health_db: off", "stopped": "redis stopped mid-drill"}
print(f"fleet drill: 2 machines x {runs} runs, primary 503 forever, chain [B], default retry settings")
print(f"{'mode':28} {'primary requests':>17} {'runs finished on B':>19}")
for mode in ["redis", "off", "stopped"]:
    r = rows.get(mode, [])
    if not r: continue
    req = statistics.median(x[0] for x in r)
    print(f"{names[mode]:28} {req:>17.0f} {min(x[1] for x in r):>12}/{r[0][2]}")
print(f"(medians over {len(rows['off'])} repetitions; each run alone pays 6 requests: {2*runs*6} in all)")
PY

echo
echo "cost of one operation (loopback Redis, then the SQLite file):"
start_redis
TINYAGENT_BENCH_REDIS="redis://127.0.0.1:$port/0" cargo bench --quiet --bench health_read 2>/dev/null
