"""Root filesystems for the images: the debootstrap base (cached) and commands run inside a root with apt's cache.

Commands run in a chroot inside a private mount namespace (`unshare -m`): /proc, /sys, /dev, the host's
resolv.conf and the build's apt lists and archives are mounted in only for the command and vanish with it, so no
mount outlives a build and the root never holds package lists or .deb files.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from pykubevirt.images import spec

# Keeps daemons that packages' maintainer scripts would start from starting in the build root.
POLICY_RC_D = "#!/bin/sh\nexit 101\n"


def run(argv: list[str], *, env: dict[str, str] | None = None) -> None:
    """Run one build step, echoing it; a failure stops the build with the step's own output above."""
    print("+ " + shlex.join(argv), flush=True)
    subprocess.run(argv, check=True, env={**os.environ, **(env or {})})


def chroot(root: Path, script: str, *, cache: Path, binds: dict[Path, str] | None = None) -> None:
    """Run `script` with /bin/sh in `root`, apt's lists and archives from `cache`, and `binds` (host → in-root)."""
    mounts = {
        Path("/etc/resolv.conf"): "/etc/resolv.conf",
        cache / "apt-lists": "/var/lib/apt/lists",
        cache / "apt-archives": "/var/cache/apt/archives",
        **(binds or {}),
    }
    steps = [
        f"mount -t proc proc {root}/proc",
        f"mount -t sysfs sysfs {root}/sys",
        f"mount --rbind /dev {root}/dev",
    ]
    for source, target in mounts.items():
        inside = root / target.lstrip("/")
        if source.is_file():
            inside.touch()
        else:
            source.mkdir(parents=True, exist_ok=True)
            inside.mkdir(parents=True, exist_ok=True)
        steps.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(inside))}")
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)
    try:
        # The host's environment stays out (PIP_* and the like would reach pip in the root).
        clean = "env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8"
        inner = f"exec chroot {shlex.quote(str(root))} {clean} /bin/sh -c {shlex.quote(script)}"
        run(["unshare", "-m", "--propagation", "private", "sh", "-ec", " && ".join([*steps, inner])])
    finally:
        policy.unlink()


def remove_volatile(root: Path) -> None:
    """Delete the logs and caches that differ between runs (spec.VOLATILE_PATHS) and the build's mount points."""
    for pattern in spec.VOLATILE_PATHS:
        for path in glob.glob(str(root) + pattern):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    resolv = root / "etc/resolv.conf"
    if resolv.exists() or resolv.is_symlink():
        resolv.unlink()
    resolv.touch()
    wheels = root / "tmp/wheels"
    if wheels.is_dir():
        wheels.rmdir()


def clamp_mtimes(root: Path, epoch: int) -> None:
    """Set every file newer than `epoch` to it, so a layer's bytes do not depend on when it was built."""
    run(["find", str(root), "-xdev", "-newermt", f"@{epoch}", "-exec", "touch", "-h", "-d", f"@{epoch}", "{}", "+"])


def base_key(host_sources: str) -> str:
    """What the cached base depends on: its sources and the filters and apt settings written into it."""
    text = "\n".join([spec.SUITE, spec.apt_sources(host_sources), spec.DPKG_EXCLUDES, spec.APT_CONF, "v2"])
    text += f"\n{spec.BASE_EPOCH}"
    return hashlib.sha256(text.encode()).hexdigest()


def base_rootfs(cache: Path, host_sources: str) -> Path:
    """The slim Debian base (debootstrap minbase + updates), built once and then reused from `cache`.

    Its times are clamped to spec.BASE_EPOCH, not to the commit's: a cached base and a fresh one (same mirror
    contents) are the same layer, so one commit gives the same image digests with or without the cache.
    """
    epoch = spec.BASE_EPOCH
    root = cache / "base-rootfs"
    stamp = cache / "base-rootfs.key"
    key = base_key(host_sources)
    if root.is_dir() and stamp.is_file() and stamp.read_text() == key:
        print(f"images: reusing the base root in {root}", flush=True)
        return root
    fresh = cache / "base-rootfs.tmp"
    for stale in (root, fresh):
        if stale.exists():
            shutil.rmtree(stale)
    stamp.unlink(missing_ok=True)
    archives = cache / "apt-archives"
    archives.mkdir(parents=True, exist_ok=True)
    debootstrap = ["debootstrap", "--variant=minbase", f"--cache-dir={archives}"]
    run([*debootstrap, spec.SUITE, str(fresh), spec.mirror(host_sources)], env={"SOURCE_DATE_EPOCH": str(epoch)})
    _configure(fresh, host_sources)
    chroot(
        fresh,
        f"export DEBIAN_FRONTEND=noninteractive SOURCE_DATE_EPOCH={epoch}; apt-get update -qq"
        " && apt-get dist-upgrade -y -qq >/dev/null",
        cache=cache,
    )
    _slim(fresh)
    remove_volatile(fresh)
    clamp_mtimes(fresh, epoch)
    fresh.rename(root)
    stamp.write_text(key)
    return root


def _configure(root: Path, host_sources: str) -> None:
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(spec.apt_sources(host_sources))
    (root / "etc/dpkg/dpkg.cfg.d/90pykubevirt-slim").write_text(spec.DPKG_EXCLUDES)
    (root / "etc/apt/apt.conf.d/90pykubevirt").write_text(spec.APT_CONF)


def _slim(root: Path) -> None:
    """Remove what the dpkg filters would have kept out had they been there before debootstrap's packages."""
    for directory in ("usr/share/man", "usr/share/info", "usr/share/groff", "usr/share/lintian", "usr/share/linda"):
        shutil.rmtree(root / directory, ignore_errors=True)
    locale = root / "usr/share/locale"
    for entry in locale.iterdir() if locale.is_dir() else ():
        if entry.name != "locale.alias":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for path in (root / "usr/share/doc").rglob("*"):
        if (path.is_file() or path.is_symlink()) and path.name != "copyright":
            path.unlink()
    run(["find", str(root / "usr/share/doc"), "-depth", "-type", "d", "-empty", "-delete"])
