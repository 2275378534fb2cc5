#!/usr/bin/env bash
# The test tiers. `scripts/test.sh` (make test): lint, strict typing, then the WHOLE suite (real Prometheus, real
# vLLM, helm, kmock, the OCI image included) over every core with pytest-xdist. `scripts/test.sh check` (make check):
# lint, strict typing and the fast tier (domain, decide, act, crd, policy, the CLI's rendering, the pure adapters and
# the architecture tests: no server, no engine, nothing slow). Extra arguments go to pytest. Each tier prints its
# wall time as `tier NAME: N s`; pytest prints its 25 slowest tests.
#   SHIFTLIGHT_TEST_WORKERS: pytest-xdist workers (default auto: one per core; 0 runs the tests in this process).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
export SHIFTLIGHT_ENGINE_PYTHON="${SHIFTLIGHT_ENGINE_PYTHON:-$PWD/.venv-engine/bin/python}"

mode=all
if [ "${1:-}" = "check" ]; then
  mode=check
  shift
fi
workers="${SHIFTLIGHT_TEST_WORKERS:-auto}"

# The fast tier: folders with no real servers, and in them no test marked as needing one or as slow.
CHECK_PATHS=(tests/domain tests/decide tests/act tests/crd tests/policy tests/cli tests/adapters
  tests/test_import_contracts.py tests/test_module_size.py tests/test_errors_tree.py)
CHECK_MARKERS="not slow and not engine and not vllm and not kube and not prometheus and not helm and not image"

tier() {  # tier NAME COMMAND...: run it, print its wall time, keep its status
  local name=$1 started status=0
  shift
  echo "== $name: $*"
  started=$(date +%s)
  "$@" || status=$?
  echo "tier $name: $(($(date +%s) - started)) s"
  return "$status"
}

total=$(date +%s)
status=0
tier lint .venv/bin/ruff check controller tests bench || status=1
tier typecheck .venv/bin/mypy || status=1
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n "$workers" --dist loadgroup)
if [ "$mode" = check ]; then
  tier check "${pytest[@]}" -m "$CHECK_MARKERS" "${CHECK_PATHS[@]}" "$@" || status=1
else
  tier tests "${pytest[@]}" "$@" || status=1
fi
echo "tier total: $(($(date +%s) - total)) s"
exit "$status"
