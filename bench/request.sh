#!/bin/sh
# What one step's request costs as the history grows: each wire adapter
# builds its body for a ~1, 4 and 16 MB history and writes it to a loopback
# server that reads it whole and answers at once. Prints medians of 15 steps
# per size (Markdown table), ms per MB of history, and how much a step grows
# per MB of history (from the 1 MB to the 16 MB one). Release mode.
set -e
cd "$(dirname "$0")/.."
cargo test --release --lib model::request_bench -- --ignored --nocapture --test-threads 1 2>&1 | grep -E '^\||test result'
