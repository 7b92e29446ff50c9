#!/usr/bin/env bash
# Installs what pykubevirt needs on a Debian 12 host, as root. Idempotent: does nothing when all is present.
set -euo pipefail

APT_PACKAGES=(
  qemu-system-x86 qemu-utils libvirt-daemon-driver-qemu libvirt-daemon libvirt-clients libvirt-dev pkg-config
  skopeo xorriso syslinux syslinux-common mtools dosfstools cpio kmod strace
  ovmf swtpm swtpm-tools
  containernetworking-plugins nftables iproute2
  # virtctl usbredir's client, which sends a local USB device to the VMI.
  usbredirect
  # The web console's browser tests drive Debian's chromium (headless).
  chromium
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The web console's front-end is bundled with npm. A host may already have Node.js from elsewhere (NodeSource's
# nodejs ships npm and conflicts with Debian's npm package), so Debian's are installed only when npm is absent.
command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The guest image build downloads Debian's kernel package, so package lists must exist even when nothing is missing.
if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
fi

# libvirt's embedded QEMU driver refuses to initialise while its configured user is unknown to the host.
if ! getent group libvirt-qemu >/dev/null; then groupadd --system libvirt-qemu; fi
if ! id libvirt-qemu >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin -g libvirt-qemu libvirt-qemu
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "setup: Python 3.11 or newer is required ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null
fi

cd "$(dirname "$0")/.."
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi
# The benches import the tests' support code: with the repository's root on the venv's path, `python bench/NAME.py`
# runs as `python -m bench.NAME` does, from any directory.
root_pth="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/pykubevirt-repository.pth"
[ "$(cat "$root_pth" 2>/dev/null)" = "$PWD" ] || echo "$PWD" >"$root_pth"
# Shell completion follows the commands' parsers: regenerated when a parser's source is newer than the scripts.
completion=.venv/share/bash-completion/completions/virtctl
parsers=(src/pykubevirt/cli src/pykubevirt/virtctl src/pykubevirt/launcher/arguments.py)
if [ ! -f "$completion" ] || [ -n "$(find "${parsers[@]}" -name '*.py' -newer "$completion" | head -n 1)" ]; then
  scripts/install-completion.sh .venv
fi

# The web console's front-end: npm packages pinned by webconsole/package-lock.json, bundled into the Python package's
# static directory; rebuilt when a source or the lockfile is newer than the bundle. Nothing is fetched at run time.
bundle=src/pykubevirt/webconsole/static/dist/app.js
if [ ! -f "$bundle" ] || [ -n "$(find webconsole/src webconsole/package-lock.json -newer "$bundle" | head -n 1)" ]; then
  (cd webconsole && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
fi
