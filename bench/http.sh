#!/usr/bin/env bash
# HTTP adapter benchmark: stream parsing throughput and 50/200/800-step agent
# runs over a loopback stub (Chat Completions and Ollama), with peak RSS.
# Needs /usr/bin/time (GNU time). Prints a Markdown report.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
TINYAGENT_BIN="$PWD/target/release/tinyagent" cargo bench --quiet --bench http
