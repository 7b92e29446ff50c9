"""What each image holds and how it is configured: pure data and the umoci/apt text derived from it.

Two images, as KubeVirt ships its components: `pykubevirt` runs virt-controller, virt-api and virt-handler (pure
Python, so it carries only python3), and `virt-launcher` carries QEMU, libvirt, OVMF and swtpm beside the launcher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from pykubevirt import __version__

SUITE = "bookworm"
# The base layer's time (Debian 12's release day, 2023-06-10): fixed, so the base does not change with each commit.
BASE_EPOCH = 1_686_355_200
VENV = "/opt/pykubevirt"
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# KubeVirt's launcher runs QEMU as uid/gid 107 ("qemu") when non-root; libvirt's QEMU driver looks this user up by
# name at start, even with user = "root" in qemu.conf, and refuses to initialise when it is unknown.
QEMU_UID = 107
QEMU_USER = "libvirt-qemu"

# The one schema directory of kubernetes-validate the API server reads (apiserver.builtin_openapi); the package
# ships 26 (13 Kubernetes versions, loose and strict: 108 MB), so the images keep only this one.
SCHEMA_PACKAGE_DIR = "kubernetes_validate/kubernetes-json-schema"

# Documentation, manuals and translations are never read in a container; copyright files stay (licences).
DPKG_EXCLUDES = """\
# pykubevirt images: no documentation, manuals or translations (dpkg path filters).
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/groff/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/linda/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
"""

# No Recommends (KubeVirt's launcher would otherwise pull xen, lxc and lvm drivers) and no apt binary caches.
APT_CONF = """\
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""

# Logs and caches that differ from run to run and that no container reads.
VOLATILE_PATHS = (
    "/var/log/apt/*",
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/log/bootstrap.log",
    "/var/cache/ldconfig/aux-cache",
    "/var/cache/debconf/*-old",
    "/var/lib/dpkg/*-old",
    "/var/cache/apt/*.bin",
    "/var/cache/apt/archives/*.deb",
    "/var/lib/apt/lists/*",
    "/etc/hostname",
    "/etc/machine-id",
)


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One image: its name, packages, default process and the commands a built image must run."""

    name: str
    repository: str
    description: str
    packages: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    # Each must exit 0 inside the image (the image test runs them in a chroot).
    checks: tuple[tuple[str, ...], ...]
    # Shell run in the image after the install, before the cleanup.
    extra_setup: str = ""
    # Executables written into the image as they are: absolute path → content.
    files: tuple[tuple[str, str], ...] = ()

    def reference(self, tag: str) -> str:
        return f"{self.repository}:{tag}"

    def normalized_reference(self, tag: str) -> str:
        """The name a docker-archive records and containerd imports: Docker Hub's, as kubelet resolves `image:`."""
        path = self.repository if "/" in self.repository else f"library/{self.repository}"
        return f"docker.io/{path}:{tag}"


PYKUBEVIRT = ImageSpec(
    name="pykubevirt",
    repository="pykubevirt",
    description="pykubevirt's virt-controller, virt-api and virt-handler",
    packages=("python3",),
    entrypoint=("pykubevirt",),
    cmd=("--help",),
    checks=(
        ("pykubevirt", "virt-controller", "--help"),
        ("pykubevirt", "virt-api", "--help"),
        ("pykubevirt", "virt-handler", "--help"),
        ("virtctl", "--help"),
    ),
)

# The guest-console-log sidecar's command (controller.launcher_pod renders `/usr/bin/virt-tail --logfile FILE` with
# the launcher image): serial port 0's log to stdout, from its start and as it grows, waiting for it to appear.
VIRT_TAIL = """\
#!/bin/sh
# virt-tail --logfile FILE: FILE on stdout from its first line, followed as it grows (KubeVirt's cmd/virt-tail).
logfile=
while [ $# -gt 0 ]; do
  case "$1" in
    --logfile) logfile=$2; shift 2 ;;
    --logfile=*) logfile=${1#--logfile=}; shift ;;
    *) shift ;;
  esac
done
[ -n "$logfile" ] || { echo "virt-tail: --logfile is required" >&2; exit 2; }
exec tail -n +1 -F "$logfile"
"""

LAUNCHER = ImageSpec(
    name="virt-launcher",
    repository="virt-launcher",
    description="pykubevirt's virt-launcher: one VMI's libvirt and QEMU",
    packages=(
        "python3",
        "qemu-system-x86",
        "qemu-utils",
        "libvirt-daemon",
        "libvirt-daemon-driver-qemu",
        "libvirt-clients",
        "ovmf",
        "swtpm",
        "swtpm-tools",
        "iproute2",
        "nftables",
    ),
    entrypoint=("pykubevirt", "virt-launcher"),
    cmd=("--help",),
    checks=(
        ("pykubevirt", "virt-launcher", "--help"),
        ("qemu-system-x86_64", "--version"),
        ("qemu-img", "--version"),
        ("/usr/sbin/libvirtd", "--version"),
        ("virsh", "--version"),
        ("swtpm", "--version"),
        ("python", "-c", "import libvirt; print(libvirt.getVersion())"),
        ("nft", "--version"),
        ("ip", "-V"),
        ("id", QEMU_USER),
        # tail -F never ends: the first line read proves the script, timeout ends the follow.
        ("sh", "-c", "timeout 2 virt-tail --logfile /etc/debian_version | grep -q ^12"),
    ),
    files=(("/usr/bin/virt-tail", VIRT_TAIL),),
    extra_setup=(
        f"groupadd --system --gid {QEMU_UID} {QEMU_USER}\n"
        f"useradd --system --uid {QEMU_UID} --gid {QEMU_UID} --no-create-home --home-dir /var/lib/libvirt"
        f" --shell /usr/sbin/nologin {QEMU_USER}\n"
    ),
)

IMAGES = (PYKUBEVIRT, LAUNCHER)


def image_tags(commit: str, *, dirty: bool, version: str = __version__) -> tuple[str, ...]:
    """The tags of one build: `git-<12 hex>` (`-dirty` with uncommitted changes) first, then the version and latest.

    `latest` is what deploy/kustomization.yaml's images: name until an overlay points them at a `git-` tag.
    """
    if not re.fullmatch(r"[0-9a-f]{12,40}", commit):
        raise ValueError(f"not a git commit id: {commit!r}")
    primary = f"git-{commit[:12]}" + ("-dirty" if dirty else "")
    return (primary, version, "latest")


def timestamp(epoch: int) -> str:
    """RFC 3339 in UTC, second precision, as OCI's created fields and umoci's flags take it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels(spec: ImageSpec, *, commit: str, epoch: int, version: str = __version__) -> dict[str, str]:
    """The OCI annotation keys KubeVirt's images carry, from the commit the image was built from."""
    return {
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": commit,
        "org.opencontainers.image.created": timestamp(epoch),
        "org.opencontainers.image.base.name": f"debian:{SUITE} (debootstrap --variant=minbase)",
    }


def config_args(spec: ImageSpec, *, commit: str, epoch: int) -> list[str]:
    """`umoci config` flags for the image's runtime configuration (entrypoint, command, environment, labels)."""
    args = ["--created", timestamp(epoch), "--author", "pykubevirt", "--architecture", "amd64"]
    args += ["--os", "linux", "--config.workingdir", "/", "--config.user", "0:0"]
    args += ["--config.env", f"PATH={PATH}", "--config.env", "LANG=C.UTF-8"]
    for word in spec.entrypoint:
        args += ["--config.entrypoint", word]
    for word in spec.cmd:
        args += ["--config.cmd", word]
    for key, value in labels(spec, commit=commit, epoch=epoch).items():
        args += ["--config.label", f"{key}={value}"]
    return [*args, "--no-history"]


def apt_sources(host_sources: str) -> str:
    """The image's deb822 sources: the host's mirrors for the suite, its updates and security, without comments."""
    stanzas = []
    for block in re.split(r"\n\s*\n", host_sources.strip()):
        fields = dict(
            line.split(":", 1) for line in block.splitlines() if ":" in line and not line.lstrip().startswith("#")
        )
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        suites = [s for s in fields.get("Suites", "").split() if s.split("-")[0] == SUITE]
        if "deb" not in fields.get("Types", "").split() or not suites or not fields.get("URIs"):
            continue
        stanzas.append(
            f"Types: deb\nURIs: {fields['URIs']}\nSuites: {' '.join(suites)}\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
    if not stanzas:
        raise ValueError(f"no deb source for {SUITE} in the host's sources")
    return "\n".join(stanzas)


def mirror(host_sources: str) -> str:
    """The first URI serving the suite itself: where debootstrap fetches the base from."""
    for stanza in apt_sources(host_sources).split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.strip().splitlines())
        if SUITE in fields["Suites"].split():
            return fields["URIs"].split()[0]
    raise ValueError(f"no mirror serves {SUITE} itself")


def schema_dir() -> str:
    """The kubernetes-validate directory of the Kubernetes version the API server reports."""
    from pykubevirt.apiserver.discovery import KUBE_MINOR

    return f"v1.{KUBE_MINOR}.0-local"


def install_script(spec: ImageSpec, *, epoch: int, version: str = __version__, update: bool) -> str:
    """The shell run inside the image's root: its packages, then the pykubevirt venv from the wheels in /tmp/wheels.

    apt's lists and archives are the build cache's, mounted in, so nothing here cleans them (see VOLATILE_PATHS).
    """
    packages = " ".join(spec.packages)
    pip = "$(echo /tmp/wheels/pip-*.whl)/pip"
    lines = [
        "set -eu",
        # useradd's password dates and dpkg's generated files take their time from SOURCE_DATE_EPOCH.
        f"export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH={epoch}",
        "apt-get update -qq" if update else ":",
        f"apt-get install -y -qq --no-install-recommends {packages} >/dev/null",
        f"python3 -m venv --without-pip {VENV}",
        # pip runs from its wheel, so the image carries no pip; the .pyc files are compiled below, reproducibly.
        f"{VENV}/bin/python {pip} install -q --no-index --find-links /tmp/wheels --no-compile"
        f" --no-cache-dir --disable-pip-version-check pykubevirt=={version}",
        f"schemas=$(echo {VENV}/lib/python3*/site-packages/{SCHEMA_PACKAGE_DIR})",
        f'find "$schemas" -mindepth 1 -maxdepth 1 ! -name {schema_dir()} -exec rm -rf {{}} +',
        f"{VENV}/bin/python -m compileall -q -j 0 --invalidation-mode checked-hash {VENV}",
        f"ln -sf {VENV}/bin/pykubevirt {VENV}/bin/virtctl /usr/local/bin/",
        spec.extra_setup.rstrip("\n") or ":",
    ]
    return "\n".join(lines) + "\n"
