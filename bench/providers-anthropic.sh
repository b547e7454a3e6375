#!/bin/sh
# SSE parsing throughput of a large streamed Anthropic reply (about 30 MB,
# 250k events) through the Anthropic adapter: the event assembly alone and the
# whole adapter (reqwest + SSE parser + assembly) over loopback HTTP.
# Prints medians of 5 runs. Release mode.
set -e
cd "$(dirname "$0")/.."
cargo test --release --lib anthropic::bench -- --ignored --nocapture 2>&1 | grep -E "anthropic SSE|test result"
