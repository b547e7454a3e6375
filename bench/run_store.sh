#!/usr/bin/env bash
# Run store benchmarks: what keeping a run costs.
#
#   bench/run_store.sh
#
# 1. `cargo bench --bench run_store`: the store's work at a run's start
#    (index read, prune, atomic write) with 100 and 1000 runs kept, and the
#    trajectory a run without -o now writes (create at start, finish at end),
#    library level, medians of 200.
# 2. End to end with the release binary and an offline script model, through
#    hyperfine: a one-step run kept in the store against the same run with
#    --no-save (health_db: off, so only the store differs).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo bench --bench run_store
cargo build --release --quiet
BIN=$PWD/target/release/tinyagent

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
