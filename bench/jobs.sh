#!/usr/bin/env bash
# Benchmarks the per-run overhead of the jobs features with the offline
# script model: --output-schema, stop/pre/post hooks, a delegated subagent,
# and a compaction. Needs hyperfine and a release build:
#   cargo build --release && bench/jobs.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TINYAGENT_BIN:-$root/target/release/tinyagent}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/work" "$tmp/home"
export HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" XDG_STATE_HOME="$tmp/home/.local/state"

cat > "$tmp/plain.yaml" <<'YAML'
- tool_calls:
  - {name: bash, arguments: {command: 'echo hi'}}
- tool_calls:
  - {name: submit, arguments: {output: {answer: 42}}}
YAML
cat > "$tmp/schema.json" <<'JSON'
{"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
JSON
cat > "$tmp/hooks.yaml" <<'YAML'
hooks:
  stop: [{command: "true"}]
  pre_tool: [{command: "cat >/dev/null"}]
  post_tool: [{command: "cat >/dev/null"}]
YAML
cat > "$tmp/child.yaml" <<'YAML'
- tool_calls:
  - {name: list_files, arguments: {path: .}}
- tool_calls:
  - {name: submit, arguments: {output: report}}
YAML
cat > "$tmp/sub.yaml" <<YAML
subagents: {model: script/$tmp/child.yaml, step_limit: 5}
YAML
cat > "$tmp/parent.yaml" <<'YAML'
- tool_calls:
  - {name: delegate, arguments: {task: look around}}
- tool_calls:
  - {name: submit, arguments: {output: done}}
YAML
# Six bash turns with 3 kB outputs, then an answer. With a 2000-token
# window the history is compacted before steps 4 to 7, each compaction
# taking the scripted summary reply before the step's own reply, so both
# variants run the same six commands.
cat > "$tmp/long.yaml" <<'YAML'
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: submit, arguments: {output: done}}
YAML
cat > "$tmp/long-compact.yaml" <<'YAML'
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- text: the summary of the earlier steps
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- text: the summary of the earlier steps
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- text: the summary of the earlier steps
- tool_calls:
  - {name: bash, arguments: {command: 'head -c 3000 /dev/zero | tr "\0" x'}}
- text: the summary of the earlier steps
- tool_calls:
  - {name: submit, arguments: {output: done}}
YAML
echo "compaction: {threshold: 0.5, default_context_window: 2000}" > "$tmp/compact.yaml"

cd "$tmp/work"
hyperfine --warmup 3 --runs "${RUNS:-30}" -N --export-json "$tmp/out.json" \
  -n plain "$bin -q -m script/$tmp/plain.yaml task" \
  -n output-schema "$bin -q -m script/$tmp/plain.yaml --output-schema $tmp/schema.json task" \
  -n hooks "$bin -q -m script/$tmp/plain.yaml -c $tmp/hooks.yaml task" \
  -n delegate "$bin -q -m script/$tmp/parent.yaml -c $tmp/sub.yaml task" \
  -n long-no-compaction "$bin -q -m script/$tmp/long.yaml task" \
  -n long-compaction "$bin -q -m script/$tmp/long-compact.yaml -c $tmp/compact.yaml task" >/dev/null
python3 - "$tmp/out.json" <<'PY'
import json, sys
print(f"{'variant':<20} {'median ms':>10} {'mean ms':>9} {'user ms':>8} {'sys ms':>7}")
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"{r['command']:<20} {r['median']*1e3:>10.1f} {r['mean']*1e3:>9.1f} {r['user']*1e3:>8.1f} {r['system']*1e3:>7.1f}")
PY
