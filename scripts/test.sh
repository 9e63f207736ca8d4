#!/usr/bin/env bash
# Install, then run the whole test suite (GPU tests are skipped without a CUDA device).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python -m pytest -q "$@"
