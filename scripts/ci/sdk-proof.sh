#!/usr/bin/env bash
# Proves each loopback fake cloud under tests/fakes/ against the vendor's own
# SDK (boto3, anthropic's AnthropicBedrock/AnthropicVertex, google-genai,
# openai's AzureOpenAI, azure-identity's credentials): tests/sdk/test_*.py start a fake and talk to it
# through the SDK. A fake the SDK cannot talk to is wrong, and tinyagent's
# tests run against the same fakes. Loopback only: every test sets
# AWS_EC2_METADATA_DISABLED=true and points GCE_METADATA_HOST and Azure's
# instance metadata service at loopback.
set -euo pipefail
cd "$(dirname "$0")/../.."
shopt -s nullglob
tests=(tests/sdk/test_*.py)
if [ ${#tests[@]} -eq 0 ]; then
  echo "sdk-proof: no SDK tests"
  exit 0
fi
VENV="${TINYAGENT_SDK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tinyagent-sdk}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  pytest boto3 'anthropic[bedrock,vertex]' google-genai google-auth openai azure-identity
export AWS_EC2_METADATA_DISABLED=true
export GCE_METADATA_HOST=127.0.0.1:9
export GCE_METADATA_IP=127.0.0.1:9
export AZURE_POD_IDENTITY_AUTHORITY_HOST=http://127.0.0.1:9
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/sdk
