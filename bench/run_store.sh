#!/usr/bin/env bash
# Run store benchmarks: what keeping a run costs.
#
#   bench/run_store.sh
#
# 1. `cargo bench --bench run_store`: library level, medians of 200: what a
#    kept run pays on its critical path at the start (Keep::begin, the
#    trajectory's create_volatile) and at the end (the step's journal line,
#    Checkpoint::finish), and the index update that runs meanwhile on its
#    own thread, with 100 and 1000 runs kept.
# 2. `python3 bench/run_store_e2e.py`: the release binary against a loopback
#    stub model, kept against --no-save: spawn to the first request (start)
#    and the reply sent to exit (end), medians; the store's cost is the
#    difference.
# 3. hyperfine: a whole one-step run with the offline script model (no
#    latency at all, so whatever runs beside the first request shows up),
#    kept against --no-save (health_db: off, so only the store differs).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo bench --bench run_store
cargo build --release --quiet
BIN=$PWD/target/release/tinyagent
python3 bench/run_store_e2e.py "$BIN" 200

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home/.config/tinyagent"
echo "health_db: off" > "$work/home/.config/tinyagent/config.yaml"
echo "- text: done" > "$work/answer.yaml"
export HOME=$work/home XDG_CONFIG_HOME=$work/home/.config XDG_STATE_HOME=$work/home/.local/state
# Fill the store with 100 runs first, so pruning and the index are at size.
for _ in $(seq 100); do "$BIN" -q -m "script/$work/answer.yaml" task > /dev/null; done
hyperfine -N --warmup 5 --runs 100 \
  "$BIN -q -m script/$work/answer.yaml task" \
  "$BIN -q --no-save -m script/$work/answer.yaml task"
