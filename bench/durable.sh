#!/usr/bin/env bash
# Durability benchmarks: the log database and trajectory checkpoints.
#
#   bench/durable.sh            # everything (builds release first)
#   STEPS=200 bench/durable.sh  # shorter end-to-end runs
#
# 1. `cargo bench --bench durable`: events/second into the log database
#    (one run, eight concurrent runs) and checkpoint cost per step at steps
#    10, 100 and 1000 with 10 KB tool outputs (library level, exact).
# 2. End to end with the release binary and an offline script model:
#    per-step cost of --log-db and of -o (wall time with and without), and
#    eight concurrent runs into one database, every event counted.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-500}
cargo bench --bench durable
cargo build --release --quiet
BIN=$PWD/target/release/tinyagent

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$work/steps.yaml
{
  echo "- tool_calls:"
  echo "    - {name: plan, arguments: {items: [{text: step, status: in_progress}]}}"
  echo "  repeat: $((STEPS - 1))"
  echo "- tool_calls:"
  echo "    - {name: submit, arguments: {output: done}}"
} > "$script"
export HOME=$work XDG_CONFIG_HOME=$work/config

echo
echo "end to end, $STEPS steps per run (plan tool, offline script model):"
hyperfine --warmup 1 --runs 5 --export-json "$work/e2e.json" \
  -n plain "$BIN -m script/$script -q task" \
  -n log-db "rm -f $work/one.db*; $BIN -m script/$script -q --log-db $work/one.db task" \
  -n trajectory "$BIN -m script/$script -q -o $work/run.json task" >/dev/null
python3 - "$work/e2e.json" "$STEPS" <<'EOF'
import json, sys
runs = {r["command"]: r["median"] for r in json.load(open(sys.argv[1]))["results"]}
steps = int(sys.argv[2])
base = runs["plain"]
print(f"  plain run:    {base * 1e3:8.1f} ms ({base / steps * 1e3:.3f} ms per step)")
for name in ("log-db", "trajectory"):
    extra = (runs[name] - base) / steps * 1e3
    print(f"  {name:<12}  {runs[name] * 1e3:8.1f} ms, adds {extra:.3f} ms per step (median of 5)")
EOF

rm -f "$work"/shared.db*
start=$(date +%s.%N)
for i in 1 2 3 4 5 6 7 8; do
  "$BIN" -m "script/$script" --json --log-db "$work/shared.db" "task $i" > "$work/out.$i" &
done
wait
end=$(date +%s.%N)
lines=$(cat "$work"/out.* | wc -l)
stored=$(sqlite3 "$work/shared.db" "select count(*) from events")
runs=$(sqlite3 "$work/shared.db" "select count(*) from runs where status = 'submitted'")
python3 -c "print(f'  8 concurrent runs: {$stored} of {$lines} events stored, {$runs} runs submitted, {($end - $start):.2f} s wall, {$stored / ($end - $start):.0f} events/s')"
