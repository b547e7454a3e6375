#!/usr/bin/env bash
# Compatibility suite, step 2: runs tinyagent against real servers on
# loopback and prints a pass/fail table. Needs scripts/compat/setup.sh first.
#
#   scripts/compat/run.sh            # run the suite
#   scripts/compat/run.sh --record   # also record response bytes into testdata/recorded/
#
# Servers: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M
# (chat format chatml-function-calling, so it takes tools), and LiteLLM's
# proxy in front of it (Chat Completions, Anthropic Messages, Responses)
# plus a LiteLLM `mock_response` model (a rate-limit error, for recording),
# and an OTLP/HTTP receiver decoding with the OpenTelemetry project's Python
# bindings (otlp_receiver.py). Every case is a tinyagent run with tools; a
# case passes when the run ends without error after at least two model
# responses and one tool call, and no response has 0 tokens; a trace case
# also needs the run's whole trace (SPEC 16) at that receiver. The servers
# are stopped on exit, whatever happens.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${TINYAGENT_COMPAT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tinyagent-compat}"
VENV="$DIR/venv"
LLAMA_PORT="${LLAMA_PORT:-18431}"
LITELLM_PORT="${LITELLM_PORT:-18432}"
OTLP_PORT="${OTLP_PORT:-18433}"
RECORD=0
[ "${1:-}" = "--record" ] && RECORD=1

if [ ! -x "$VENV/bin/python" ] || [ ! -s "$DIR/model-path" ]; then
    echo "run: no servers installed under $DIR; run scripts/compat/setup.sh first" >&2
    exit 2
fi
MODEL="$(cat "$DIR/model-path")"

BIN="${TINYAGENT_BIN:-}"
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --quiet) || exit 2
    BIN="$ROOT/target/debug/tinyagent"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tinyagent-compat.XXXXXX")"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        # Each server runs in its own session: end its whole group.
        kill -TERM -- "-$pid" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null
    done
    echo "run: servers stopped; logs and outputs in $WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # URL SECONDS NAME LOG
    for _ in $(seq "$2"); do
        if curl -fsS -o /dev/null "$1" 2>/dev/null; then
            return 0
        fi
        sleep 1
    done
    echo "run: $3 did not come up on $1; its log:" >&2
    tail -n 30 "$4" >&2
    exit 1
}

# llama-cpp-python: SmolLM2's whole 8192-token window.
setsid "$VENV/bin/python" -m llama_cpp.server \
    --model "$MODEL" --model_alias smollm2 \
    --chat_format chatml-function-calling \
    --n_ctx 8192 --seed 7 \
    --host 127.0.0.1 --port "$LLAMA_PORT" \
    >"$WORK/llama.log" 2>&1 &
PIDS+=($!)

cat >"$WORK/litellm.yaml" <<EOF
model_list:
  - model_name: smollm2
    litellm_params:
      model: openai/smollm2
      api_base: http://127.0.0.1:$LLAMA_PORT/v1
      api_key: none
  # The Responses API bridged to llama-cpp-python's Chat Completions.
  - model_name: smollm2-responses
    litellm_params:
      model: openai/chat_completions/smollm2
      api_base: http://127.0.0.1:$LLAMA_PORT/v1
      api_key: none
  # A mock model that fails like an overloaded upstream.
  - model_name: mock-ratelimit
    litellm_params:
      model: openai/mock-ratelimit
      mock_response: litellm.RateLimitError
litellm_settings:
  telemetry: false
  # LiteLLM 1.90.0 drops "content" from the assistant tool-call messages it
  # translates from /v1/messages and /v1/responses; llama-cpp-python's
  # template needs the key (HTTP 500 "'dict object' has no attribute
  # 'content'"). This hook (written below) puts content "" back, as
  # tinyagent itself sends on Chat Completions. It also joins a system
  # message's text blocks into one string: /v1/messages takes "system" as a
  # list of blocks (every client that asks for a prompt cache sends one,
  # tinyagent included), LiteLLM passes the list on, and llama-cpp-python
  # takes only a string (HTTP 500 "Input should be a valid string").
  # Anyone running this pair needs it, whatever the client.
  callbacks: content_hook.handler
  # /v1/messages through llama-cpp-python's Chat Completions (not Responses).
  use_chat_completions_url_for_anthropic_messages: true
EOF
cat >"$WORK/content_hook.py" <<'HOOK'
from litellm.integrations.custom_logger import CustomLogger


class RestoreContent(CustomLogger):
    async def async_pre_call_deployment_hook(self, kwargs, call_type):
        for m in kwargs.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None:
                m["content"] = ""
            if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), list):
                m["content"] = "\n\n".join(
                    b.get("text", "") for b in m["content"] if isinstance(b, dict)
                )
        return kwargs


handler = RestoreContent()
HOOK
# No network: LiteLLM keeps to its bundled model-cost map.
PYTHONPATH="$WORK" LITELLM_LOCAL_MODEL_COST_MAP=True setsid "$VENV/bin/litellm" \
    --config "$WORK/litellm.yaml" --host 127.0.0.1 --port "$LITELLM_PORT" \
    >"$WORK/litellm.log" 2>&1 &
PIDS+=($!)

setsid "$VENV/bin/python" "$ROOT/scripts/compat/otlp_receiver.py" serve "$OTLP_PORT" "$WORK/spans.jsonl" \
    >"$WORK/otlp.log" 2>&1 &
PIDS+=($!)

wait_for "http://127.0.0.1:$LLAMA_PORT/v1/models" 180 llama-cpp-python "$WORK/llama.log"
wait_for "http://127.0.0.1:$LITELLM_PORT/health/liveliness" 240 LiteLLM "$WORK/litellm.log"

if [ "$RECORD" = 1 ]; then
    "$VENV/bin/python" "$ROOT/scripts/compat/record.py" \
        --llama "http://127.0.0.1:$LLAMA_PORT" --litellm "http://127.0.0.1:$LITELLM_PORT" \
        --out "$ROOT/testdata/recorded" || echo "run: recording failed" >&2
fi

cat >"$WORK/tinyagent.yaml" <<EOF
providers:
  # llama-cpp-python's chatml-function-calling ignores tools unless asked
  # (tool_choice), and cannot stream a call it chose itself (stream: false).
  # The LiteLLM routes below reach the same server, so they need the same.
  llama:
    api: openai
    endpoint: http://127.0.0.1:$LLAMA_PORT/v1
    stream: false
    tool_choice: auto
    models:
      smollm2: {context_window: 8192, input_price: 1.0, output_price: 2.0}
  lite:
    api: openai
    endpoint: http://127.0.0.1:$LITELLM_PORT/v1
    stream: false
    tool_choice: auto
    models:
      smollm2: {context_window: 8192, input_price: 1.0, output_price: 2.0}
  liteanthropic:
    api: anthropic
    endpoint: http://127.0.0.1:$LITELLM_PORT
    stream: false
    tool_choice: auto
    models:
      smollm2: {context_window: 8192, input_price: 1.0, output_price: 2.0}
  literesponses:
    api: responses
    endpoint: http://127.0.0.1:$LITELLM_PORT/v1
    stream: false
    tool_choice: auto
    models:
      smollm2-responses: {context_window: 8192, input_price: 1.0, output_price: 2.0}
retry: {attempts: 2, backoff: 200ms}
max_output_tokens: 256
health_db: off
EOF

TASK='Use the bash tool to run the command: echo compat-ok. Then call the submit tool with the output of that command.'
# name|model spec|verdict mode|step limit|traces (none, http/protobuf, http/json)
CASES=(
    "llama-cpp-python chat completions|llama/smollm2|model|6|none"
    "LiteLLM chat completions -> llama-cpp-python|lite/smollm2|model|6|none"
    "LiteLLM messages -> llama-cpp-python|liteanthropic/smollm2|model|6|none"
    "LiteLLM responses -> llama-cpp-python|literesponses/smollm2-responses|model|6|none"
    "traces (protobuf) of a llama-cpp-python run|llama/smollm2|model|6|http/protobuf"
    "traces (http/json) of a LiteLLM run|lite/smollm2|model|6|http/json"
)

failed=0
printf '\n%-48s %-6s %s\n' "case" "result" "details"
for case in "${CASES[@]}"; do
    IFS='|' read -r name spec mode steps traces <<<"$case"
    slug="$(echo "$spec" | tr '/' '-')"
    otel=()
    if [ "$traces" != none ]; then
        slug="$slug-traces-${traces#http/}"
        otel=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$OTLP_PORT" OTEL_EXPORTER_OTLP_PROTOCOL="$traces")
    fi
    ws="$WORK/ws-$slug"
    mkdir -p "$ws"
    env HOME="$WORK/home" XDG_CONFIG_HOME="$WORK/home/.config" XDG_STATE_HOME="$WORK/home/state" \
        "${otel[@]}" "$BIN" -m "$spec" --json -c "$WORK/tinyagent.yaml" -C "$ws" \
        --step-limit "$steps" --time-limit 10m "$TASK" \
        >"$WORK/$slug.jsonl" 2>"$WORK/$slug.stderr" </dev/null
    code=$?
    verdict="$("$VENV/bin/python" "$ROOT/scripts/compat/verdict.py" "$WORK/$slug.jsonl" "$code" "$mode")"
    if [ "$traces" != none ] && [ "${verdict%% *}" = PASS ]; then
        provider="${spec%%/*}"
        port="$LLAMA_PORT"
        [ "$provider" = llama ] || port="$LITELLM_PORT"
        verdict="$("$VENV/bin/python" "$ROOT/scripts/compat/otlp_receiver.py" check \
            "$WORK/spans.jsonl" "$provider" "${spec#*/}" "$port" "$WORK/$slug.jsonl")"
    fi
    result="${verdict%% *}"
    [ "$result" = PASS ] || failed=$((failed + 1))
    printf '%-48s %-6s %s\n' "$name" "$result" "${verdict#* }"
done
echo
total=${#CASES[@]}
echo "$((total - failed)) passed, $failed failed"
[ "$failed" = 0 ]
