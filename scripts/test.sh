#!/usr/bin/env bash
# The whole test suite: lint, strict typing, then every test (real Prometheus, real vLLM, helm, kmock included).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
export SHIFTLIGHT_ENGINE_PYTHON="${SHIFTLIGHT_ENGINE_PYTHON:-$PWD/.venv-engine/bin/python}"
echo "== ruff"
.venv/bin/ruff check controller tests bench
echo "== mypy --strict"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
