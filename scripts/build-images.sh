#!/usr/bin/env bash
# `make images`: builds the pykubevirt and virt-launcher images into OUT (default _output/images), as root, with no
# container daemon: debootstrap makes the Debian 12 base, umoci the layers, skopeo the OCI layouts and docker-archives.
# Installs its own tools; the base root, apt's downloads and the wheels stay cached under OUT/cache for reruns.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-_output/images}
shift || true

TOOLS=(debootstrap umoci skopeo)
missing=()
for p in "${TOOLS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "images: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$OUT"
# This checkout's sources, also when the venv's editable install points at another checkout.
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" exec .venv/bin/python -m pykubevirt.images.build --output "$OUT" "$@"
