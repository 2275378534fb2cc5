#!/usr/bin/env bash
# One device call on the GPU host, the same command every time:
#
#   bash scripts/gpu/host-run.sh SECONDS     # run from the checkout's root; $OUT is where results go back
#
# 1. keeps the wheelhouse part this transfer carried (.gpu-wheels/wheelhouse.tar.part-NN) in /root/parts;
# 2. once every part is there and nothing is installed yet: assembles, checks sha256, installs into /root/site,
#    builds the model directory (scripts/gpu/model_dir.py) and notes the host's versions in $OUT/env.txt;
# 3. once installed: runs scripts/gpu/measure.py on the configs not yet measured, within SECONDS of this call
#    (minus what steps 1-2 took), its results copied into $OUT.
# Wheels in .gpu-wheels/extra/ (a later fix-up) are installed into /root/site as well. For the hybrid model:
#   MODEL_DIR=/root/models/qwen3.6-27b MEASURE_ARGS="--inproc --hybrid --est-scale 3" bash scripts/gpu/host-run.sh SECONDS
set -uo pipefail
T0=$(date +%s)
TOTAL=${1:-0}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export PYTHONPATH=/root/site PATH=/root/site/bin:$PATH HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
if ls .gpu-wheels/wheelhouse.tar.part-* >/dev/null 2>&1; then
    bash scripts/gpu/host-install.sh keep 2>&1 | tail -3
fi
if [ ! -f /root/site/.installed ] && [ "$(ls /root/parts/wheelhouse.tar.part-* 2>/dev/null | wc -l)" -eq "$(grep -c part- scripts/gpu/wheelhouse.sha256)" ]; then
    bash scripts/gpu/host-install.sh install && touch /root/site/.installed
    python3 scripts/gpu/model_dir.py llama-3.1-8b /root/models/llama-3.1-8b
    python3 scripts/gpu/model_dir.py qwen3.6-27b-int4 /root/models/qwen3.6-27b
    python3 scripts/gpu/model_dir.py qwen3.6-27b-int4 /root/models/qwen3.6-27b-l8 --layers 8
    {
        date -u; nvidia-smi; python3 --version
        python3 -m pip list 2>/dev/null | grep -i -E "^(torch|numba|numpy|transformers|tokenizers|triton|protobuf|pydantic|aiohttp) "
        python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
        echo "install took $(( $(date +%s) - T0 )) s in this call"
    } > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
fi
if ls .gpu-wheels/extra/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/site --upgrade .gpu-wheels/extra/*.whl
fi
LEFT=$(( TOTAL - ($(date +%s) - T0) - 10 ))
if [ -f /root/site/.installed ] && [ "$LEFT" -gt 60 ]; then
    python3 scripts/gpu/measure.py --model-dir "${MODEL_DIR:-/root/models/llama-3.1-8b}" --out "$OUT" --budget-s "$LEFT" ${MEASURE_ARGS:---inproc}
fi
echo "host-run: $(( $(date +%s) - T0 )) s"
