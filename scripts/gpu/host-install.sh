#!/usr/bin/env bash
# On the GPU host: keep one carried part, or assemble the parts, check the sha256 and install.
#
#   scripts/gpu/host-install.sh keep            # copy .gpu-wheels/* (the one part this transfer carried) to $PARTS
#   scripts/gpu/host-install.sh install         # assemble $PARTS, check sha256, pip install --target $SITE
#
# PARTS defaults to /root/parts (outside the checkout, so it outlives each transfer while the machine is warm),
# SITE to /root/site; afterwards run with PYTHONPATH=$SITE and PATH=$SITE/bin:$PATH.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PARTS=${PARTS:-/root/parts}
SITE=${SITE:-/root/site}
mkdir -p "$PARTS"
case "${1:-}" in
keep)
    cp -v "$ROOT"/.gpu-wheels/wheelhouse.tar.part-* "$PARTS"/
    (cd "$PARTS" && ls -l && grep part- "$ROOT/scripts/gpu/wheelhouse.sha256" | while read -r sum name; do
        [ -f "$name" ] && echo "$sum  $name" | sha256sum -c --quiet && echo "ok $name"; done) || true
    ;;
install)
    cd "$PARTS"
    SUMS=$ROOT/scripts/gpu/wheelhouse.sha256
    echo "$(grep -c part- "$SUMS") parts expected, $(ls wheelhouse.tar.part-* | wc -l) here"
    grep part- "$SUMS" | sha256sum -c
    cat wheelhouse.tar.part-* > /tmp/wheelhouse.tar
    (cd /tmp && grep ' wheelhouse.tar$' "$SUMS" | sha256sum -c)
    rm -rf /tmp/wheelhouse && tar -C /tmp -xf /tmp/wheelhouse.tar
    t0=$(date +%s)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" /tmp/wheelhouse/*.whl
    echo "installed $(ls /tmp/wheelhouse | wc -l) wheels into $SITE in $(( $(date +%s) - t0 )) s"
    ;;
*)
    echo "usage: $0 keep|install" >&2
    exit 2
    ;;
esac
