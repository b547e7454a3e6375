#!/usr/bin/env bash
# The logic of the GitHub Action (action.yml): installs tinyagent with
# install.sh, runs the task with `--json -o` under GitHub Actions (so the
# annotations and step summary appear), and writes the step's outputs.
#
# Inputs are INPUT_<NAME> variables, as GitHub passes them to JavaScript
# and Docker actions (upper case, `-` as `_`):
#   INPUT_TASK (required), INPUT_MODEL, INPUT_FALLBACK_MODELS (one spec a
#   line), INPUT_CONFIG (a file), INPUT_ARGS (more flags, quoted as in a
#   shell), INPUT_VERSION (default: the action's own release; `latest`).
# Outputs (to $GITHUB_OUTPUT): status, exit-code, answer, cost-usd,
# checkpoint. The step fails unless the run answered (exit 0).
#
# Runs outside GitHub too: set GITHUB_OUTPUT (and GITHUB_STEP_SUMMARY) to
# files; TINYAGENT_DOWNLOAD_URL (install.sh) points at a mirror.
set -euo pipefail

action_dir=$(cd "$(dirname "$0")/../.." && pwd)

error() {
  echo "::error title=tinyagent action::$*" >&2
  exit 1
}

# The step's outputs: status, exit-code, cost-usd, checkpoint, answer.
write_outputs() {
  # A delimiter the answer cannot hold, as @actions/core makes one.
  local delimiter
  delimiter="ghadelimiter_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  {
    echo "status=$1"
    echo "exit-code=$2"
    echo "cost-usd=$3"
    echo "checkpoint=$4"
    echo "answer<<$delimiter"
    printf '%s\n' "$5"
    echo "$delimiter"
  } >>"$GITHUB_OUTPUT"
}

[ -n "${INPUT_TASK:-}" ] || error "the input 'task' is required"
[ -n "${GITHUB_OUTPUT:-}" ] || error "GITHUB_OUTPUT is not set"
command -v jq >/dev/null 2>&1 || error "jq is needed to read the run's events (GitHub-hosted runners have it)"

# The action's own release: the version of the checkout it runs from.
version=${INPUT_VERSION:-}
if [ -z "$version" ]; then
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$action_dir/Cargo.toml" | head -n 1)
fi
[ "$version" != latest ] || version=

work="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/tinyagent-${GITHUB_RUN_ID:-local}-${GITHUB_JOB:-job}-$$"
mkdir -p "$work/bin"
echo "::group::Install tinyagent ${version:-(latest)}"
set +e
TINYAGENT_VERSION="$version" TINYAGENT_INSTALL_DIR="$work/bin" sh "$action_dir/install.sh" 2>"$work/install.err"
installed=$?
set -e
cat "$work/install.err" >&2
echo "::endgroup::"
# A failed install fails the step saying why, with its exit code as output
# (and no status: the run never started), not a silent stop under set -e.
if [ "$installed" -ne 0 ]; then
  why=$(sed -n 's/^tinyagent install: error: //p' "$work/install.err" | head -n 1)
  why=${why:-install.sh exited with $installed}
  why=${why//%/%25}
  write_outputs "" "$installed" "" "" ""
  echo "::error title=tinyagent action::installing tinyagent ${version:-(latest)} failed: $why" >&2
  exit "$installed"
fi
# Later steps of the job can call tinyagent too (e.g. --resume).
if [ -n "${GITHUB_PATH:-}" ]; then
  echo "$work/bin" >>"$GITHUB_PATH"
fi

checkpoint="$work/run.json"
events="$work/events.jsonl"
args=(--json -o "$checkpoint")
[ -z "${INPUT_MODEL:-}" ] || args+=(-m "$INPUT_MODEL")
while IFS= read -r spec; do
  spec=$(printf '%s' "$spec" | tr -d '[:space:]')
  [ -z "$spec" ] || args+=(--fallback-model "$spec")
done <<<"${INPUT_FALLBACK_MODELS:-}"
[ -z "${INPUT_CONFIG:-}" ] || args+=(-c "$INPUT_CONFIG")
if [ -n "${INPUT_ARGS:-}" ]; then
  # Split as a shell would (quotes keep words together), never evaluated.
  printf '%s' "$INPUT_ARGS" | xargs printf '%s\0' >"$work/args" 2>/dev/null ||
    error "the input 'args' cannot be split into words (an unmatched quote?): $INPUT_ARGS"
  while IFS= read -r -d '' word; do
    [ -z "$word" ] || args+=("$word")
  done <"$work/args"
fi

export GITHUB_ACTIONS=true
set +e
"$work/bin/tinyagent" "${args[@]}" -- "$INPUT_TASK" </dev/null >"$events"
code=$?
set -e

finished=$(jq -c 'select(.type == "run.finished")' "$events" 2>/dev/null | tail -n 1)
status=
answer=
cost=
if [ -n "$finished" ]; then
  status=$(jq -r '.status' <<<"$finished")
  answer=$(jq -r 'if .output == null then "" elif (.output | type) == "string" then .output else (.output | tojson) end' <<<"$finished")
  cost=$(jq -r '.cost_usd' <<<"$finished")
fi
[ -f "$checkpoint" ] || checkpoint=

write_outputs "$status" "$code" "$cost" "$checkpoint" "$answer"

if [ "$code" -ne 0 ]; then
  if [ -z "$finished" ]; then
    echo "::error title=tinyagent action::tinyagent exited with $code before the run started (see the log above)" >&2
  fi
  exit "$code"
fi
