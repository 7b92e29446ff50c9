"""Is KVM usable here? Boot a Linux kernel under KVM and see whether it gets far enough to print.

`/dev/kvm` can exist, open, and even run a boot sector while real kernels make no progress under it (seen on
the machines this project runs on). So the probe boots an actual kernel with `-accel kvm` and waits for its first
console line; without that line within a few seconds, guests run under TCG. The answer is cached per host,
QEMU binary and kernel, because a probe costs seconds and every launcher asks.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/tmp/pykubevirt/kvm-probe.json")
QEMU = "qemu-system-x86_64"
MARKER = b"Linux version"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    usable: bool
    reason: str
    qemu: str = ""
    kernel: str = ""
    seconds: float = 0.0


def _kvm_device_opens() -> str:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"/dev/kvm cannot be opened: {exc.strerror}"
    os.close(fd)
    return ""


def default_kernel() -> Path | None:
    """A kernel to probe with: the newest one in /boot."""
    kernels = sorted(glob.glob("/boot/vmlinuz-*"))
    return Path(kernels[-1]) if kernels else None


def probe(kernel: Path | None = None, *, timeout: float = 6.0, qemu: str = QEMU) -> ProbeResult:
    """Boot `kernel` under KVM for up to `timeout` seconds; usable when it prints its banner."""
    binary = shutil.which(qemu)
    if binary is None:
        return ProbeResult(False, f"{qemu} is not installed")
    problem = _kvm_device_opens()
    if problem:
        return ProbeResult(False, problem, binary)
    kernel = kernel or default_kernel()
    if kernel is None or not kernel.exists():
        return ProbeResult(False, "no kernel to probe KVM with", binary)
    with tempfile.TemporaryDirectory(prefix="kvm-probe-") as tmp:
        console = Path(tmp) / "console.log"
        started = time.monotonic()
        process = subprocess.Popen(
            [
                binary,
                "-accel",
                "kvm",
                "-machine",
                "q35",
                "-m",
                "128",
                "-display",
                "none",
                "-nodefaults",
                "-no-reboot",
                "-serial",
                f"file:{console}",
                "-kernel",
                str(kernel),
                "-append",
                "console=ttyS0 panic=-1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while time.monotonic() - started < timeout:
                if console.exists() and MARKER in console.read_bytes()[:4096]:
                    return ProbeResult(
                        True, "a kernel booted under KVM", binary, str(kernel), time.monotonic() - started
                    )
                if process.poll() is not None:
                    break
                time.sleep(0.1)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    return ProbeResult(False, f"a kernel printed nothing under KVM within {timeout:.0f}s", binary, str(kernel), timeout)


def _fingerprint(qemu: str, kernel: Path | None) -> dict[str, object]:
    def stamp(path: str | None) -> list[object]:
        if not path or not os.path.exists(path):
            return []
        info = os.stat(path)
        return [path, info.st_size, int(info.st_mtime)]

    return {
        "host_kernel": os.uname().release,
        "qemu": stamp(shutil.which(qemu)),
        "kernel": stamp(str(kernel) if kernel else None),
    }


def cached_probe(cache: Path = DEFAULT_CACHE, kernel: Path | None = None) -> ProbeResult:
    """The probe's answer for this host, from `cache` when the host, QEMU and kernel are unchanged."""
    kernel = kernel or default_kernel()
    fingerprint = _fingerprint(QEMU, kernel)
    try:
        saved = json.loads(cache.read_text())
        if saved.get("fingerprint") == fingerprint:
            return ProbeResult(**saved["result"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = probe(kernel)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"fingerprint": fingerprint, "result": asdict(result)}))
        partial.replace(cache)
    except OSError:
        pass
    return result
