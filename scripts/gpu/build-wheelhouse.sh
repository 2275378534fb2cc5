#!/usr/bin/env bash
# Build the offline wheelhouse for the H200 host (Python 3.12, x86-64) and split it into parts of at most
# 50 MiB in .gpu-wheels/ (git-ignored: add "/.gpu-wheels/" to .git/info/exclude), with sha256 sums in
# scripts/gpu/wheelhouse.sha256 (the tar is reproducible: sorted names, mtime 0, so the sums hold across builds).
#
#   scripts/gpu/build-wheelhouse.sh            # needs a Python with pip and a registry; no GPU
#
# scripts/gpu/wheels.txt pins vllm==0.26.0 and every dependency the host's image lacks (its package list is
# scripts/gpu/host-packages.txt, from the device docs). It was made by a dry-run resolution for Python 3.12:
#   pip install --dry-run --ignore-installed --only-binary=:all: --python-version 3.12 --platform ... \
#       --target /tmp/t --report report.json vllm==0.26.0 xgrammar==0.2.6 pycountry
# minus the host's packages, minus optional kernel packages vLLM imports lazily (flashinfer-python, tilelang,
# nvidia-cutlass-dsl*, tokenspeed-*, quack-kernels, humming-kernels, cuda-tile, torchcodec, pynvvideocodec,
# fastsafetensors, nvidia-cudnn-frontend, nvidia-cuda-nvcc and friends, z3-solver) and fastapi-cloud-cli/sentry.
# Known pins: xgrammar 0.2.6 (vLLM pins apache-tvm-ffi 0.1.10; newer xgrammar needs a newer one) and pycountry
# (mistral_common imports it at start-up).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-$ROOT/.gpu-wheels}
WH=$(mktemp -d)
PLATS=()
for n in 5 12 17 18 24 26 27 28 31 34 35; do PLATS+=(--platform "manylinux_2_${n}_x86_64"); done
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATS[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 \
    -d "$WH/wheelhouse" -r "$ROOT/scripts/gpu/wheels.txt"
mkdir -p "$OUT"
rm -f "$OUT"/wheelhouse.tar.part-* "$OUT"/SHA256SUMS
# An uncompressed tar (wheels are already compressed), split into 50 MiB parts: a part and the checkout (about
# 6 MiB, growing with the committed measurements) must fit in one transfer of at most 64 MiB.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$WH" -cf "$WH/wheelhouse.tar" wheelhouse
split -b 50M -d -a 2 "$WH/wheelhouse.tar" "$OUT/wheelhouse.tar.part-"
(cd "$WH" && sha256sum wheelhouse.tar) > "$OUT/SHA256SUMS"
(cd "$OUT" && sha256sum wheelhouse.tar.part-*) >> "$OUT/SHA256SUMS"
rm -rf "$WH"
cp "$OUT/SHA256SUMS" "$ROOT/scripts/gpu/wheelhouse.sha256"  # committed: the host checks the parts against it
ls -l "$OUT"
cat "$OUT/SHA256SUMS"
