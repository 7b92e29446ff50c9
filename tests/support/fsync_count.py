"""Counts a process's fsync and fdatasync calls with `strace -f -c` attached to it, as an operator would."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STRACE = shutil.which("strace")


@dataclass(slots=True)
class FsyncCount:
    """The fsync and fdatasync calls made while the counter was attached; filled in when it detaches."""

    calls: int = 0


@contextmanager
def counting_fsyncs(pid: int, timeout: float = 10.0) -> Iterator[FsyncCount]:
    """Attach `strace -f -c -e trace=fsync,fdatasync` to `pid` for the body of the `with`.

    RuntimeError when strace is not installed or cannot attach.
    """
    if STRACE is None:
        raise RuntimeError("strace not installed")
    count = FsyncCount()
    with tempfile.TemporaryDirectory(prefix="fsync-count-") as scratch:
        summary = Path(scratch) / "summary"
        tracer = subprocess.Popen(
            [STRACE, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(summary), "-p", str(pid)],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert tracer.stderr is not None
        deadline = time.monotonic() + timeout
        # strace says "Process N attached" once per thread; the first means it is attached to the main one.
        while "attached" not in tracer.stderr.readline():
            if tracer.poll() is not None or time.monotonic() > deadline:
                tracer.kill()
                raise RuntimeError(f"strace could not attach to {pid}")
        try:
            yield count
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.communicate(timeout=timeout)
        count.calls = _calls(summary.read_text())


def _calls(summary: str) -> int:
    """The calls column of strace -c's fsync and fdatasync rows."""
    total = 0
    for line in summary.splitlines():
        fields = line.split()
        if fields and fields[-1] in ("fsync", "fdatasync") and re.fullmatch(r"\d+", fields[3]):
            total += int(fields[3])
    return total
