#!/usr/bin/env bash
# Builds the operator's OCI image without a daemon or a registry, as the Containerfile's two stages do:
#   1. build: the shiftlight wheel and a wheelhouse of its runtime dependencies (no dev extras), on this machine;
#   2. runtime: a Debian bookworm root filesystem made by mmdebstrap, with the wheelhouse installed offline into
#      /opt/venv by buildah (vfs storage, chroot isolation); uid 65532, entrypoint `shiftlight`.
# Writes out/image/shiftlight-<version>.oci.tar (an OCI archive: `skopeo copy oci-archive:... docker://...`).
#
# The archive is keyed by a sha256 over its inputs (the files of controller/, policies/, pyproject.toml, README.md,
# Containerfile and this script that git tracks or would track, with their content on disk) and kept in
# ${XDG_CACHE_HOME:-$HOME/.cache}/shiftlight/image/<hash>.oci.tar, outside the checkout: a clean clone on the same
# machine links the cached archive instead of building it again (the cache keeps the three newest).
# out/image/shiftlight-<version>.oci.sha256 names the inputs' hash of the archive next to it. `--print-hash` prints
# the inputs' hash and exits.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
version=$("$python" -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")
out="$root/out/image"
work="$out/build"
name="ghcr.io/shiftlight/shiftlight:$version"
archive="$out/shiftlight-$version.oci.tar"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot

# The inputs' hash: one line per file (the sha256 of its content and its path), sorted by path, hashed again.
inputs=(controller policies pyproject.toml README.md Containerfile scripts/build-image.sh)
input_files() {
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$root" ls-files -z --cached --others --exclude-standard -- "${inputs[@]}"
  else
    find "${inputs[@]}" -type f -not -path '*/__pycache__/*' -print0
  fi
}
inputs_hash() {
  input_files | LC_ALL=C sort -zu | while IFS= read -r -d '' f; do
    if [ -f "$f" ]; then printf '%s\0' "$f"; fi  # a tracked file deleted on disk is no input
  done | xargs -0 -r sha256sum -- | sha256sum | cut -d' ' -f1
}
hash=$(inputs_hash)
if [ "${1:-}" = "--print-hash" ]; then
  echo "$hash"
  exit 0
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/shiftlight/image"
cached="$cache/$hash.oci.tar"
stamp="$out/shiftlight-$version.oci.sha256"

if ! command -v buildah >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "installing buildah and mmdebstrap (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends buildah mmdebstrap uidmap >/dev/null
fi

# Up to date: an archive of exactly these inputs was built before, here or in another checkout on this machine.
if [ -f "$cached" ]; then
  mkdir -p "$out"
  if [ ! "$archive" -ef "$cached" ]; then
    rm -f "$archive"
    ln "$cached" "$archive" 2>/dev/null || cp "$cached" "$archive"
  fi
  echo "$hash" >"$stamp"
  echo "image: $archive is up to date (inputs $hash, cached in $cache)"
  exit 0
fi

started=$(date +%s)
rm -rf "$work"
mkdir -p "$work/wheels"

# Stage 1: the wheel and its runtime dependencies, as wheels (what `pip wheel` resolves from pyproject.toml).
"$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" "$root" 2>&1 \
  | { grep -v "^WARNING: Location 'file://" || true; }
rm -rf "$root/build"

# Stage 2: the runtime root filesystem: Debian's python3 and nothing else that a build needs.
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates,tzdata \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  --customize-hook='echo "shiftlight:x:65532:65532:shiftlight:/tmp:/usr/sbin/nologin" >>"$1/etc/passwd"' \
  --customize-hook='echo "shiftlight:x:65532:" >>"$1/etc/group"' \
  bookworm "$work/rootfs.tar" http://deb.debian.org/debian

ctr=$(buildah from --quiet scratch)
cleanup() { buildah rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
buildah add --quiet "$ctr" "$work/rootfs.tar" /
buildah copy --quiet "$ctr" "$work/wheels" /tmp/wheels
buildah run "$ctr" -- /usr/bin/python3 -m venv /opt/venv
buildah run "$ctr" -- /opt/venv/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \
  --find-links /tmp/wheels "shiftlight==$version"
# The policy presets ship in the image too (the chart mounts its own copy over them).
buildah copy --quiet "$ctr" "$root/policies" /etc/shiftlight/policies
buildah run "$ctr" -- /bin/rm -rf /tmp/wheels /root/.cache
buildah config \
  --user 65532:65532 \
  --workingdir / \
  --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env HOME=/tmp \
  --env PYTHONDONTWRITEBYTECODE=1 \
  --env SHIFTLIGHT_POLICY_DIR=/etc/shiftlight/policies/v1 \
  --entrypoint '["/opt/venv/bin/shiftlight"]' \
  --cmd '["operator"]' \
  --label org.opencontainers.image.title=shiftlight \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$name" >/dev/null
trap - EXIT
rm -f "$archive" "$stamp"
mkdir -p "$cache"
buildah push --quiet "$name" "oci-archive:$cached.partial:$name"
buildah rmi "$name" >/dev/null  # the archive is the artifact; keep no copy in local storage
mv -f "$cached.partial" "$cached"
ln "$cached" "$archive" 2>/dev/null || cp "$cached" "$archive"
echo "$hash" >"$stamp"
# The cache keeps the three newest archives (each ~270 MiB).
find "$cache" -maxdepth 1 -name '*.oci.tar' -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -f
rm -rf "$work"
echo "image: $archive ($name, $(du -m "$archive" | cut -f1) MiB, built in $(( $(date +%s) - started )) s)"
