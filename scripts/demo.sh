#!/usr/bin/env bash
# Install, then answer three questions with the embedded SmolLM2-135M-Instruct on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/deepinfer generate --chat \
    --prompt "What is the capital of France?" \
    --prompt "Write a haiku about the sea." \
    --prompt "Give me three tips for writing clear code." \
    --max-tokens 96 "$@"
