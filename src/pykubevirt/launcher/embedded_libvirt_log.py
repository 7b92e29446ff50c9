"""The in-process libvirt's log (`qemu:///embed`) relayed into the launcher's JSON log, as the daemon's is.

libvirt writes its warnings and errors to file descriptor 2 in its own format. Left there they sit between the
launcher's JSON lines in `kubectl logs`, which KubeVirt's virt-launcher never shows. So fd 2 becomes a pipe read by a
thread that logs each line again (`subcomponent: libvirt`, libvirt's function:line as `pos`), while Python's own
stderr (the JSON handler, a traceback) moves to a copy of the original descriptor. KubeVirt's debug-log options reach
the embedded driver through libvirt's environment settings, read again with `virLogSetFromEnv`: the fork server
imported libvirt long before this pod's options were known.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from typing import IO

from pykubevirt.launcher.libvirt_log import relay_libvirt_stream

log = logging.getLogger("pykubevirt.launcher.embedded_libvirt_log")

JOIN_SECONDS = 1.0


class EmbeddedLibvirtLog:
    """Owns fd 2 while the launcher runs: `start()` before libvirt logs, `stop()` before the process exits."""

    def __init__(self) -> None:
        self._original: int | None = None
        self._reader: threading.Thread | None = None
        self._python_stderr: IO[str] | None = None

    def start(self) -> None:
        try:
            self._original = os.dup(2)
        except OSError:
            return  # no fd 2 to take over: libvirt's lines have nowhere to go either
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        # Python's writes keep going straight to the container's log: a crash's traceback must not depend on a thread.
        self._python_stderr = os.fdopen(os.dup(self._original), "w", buffering=1, errors="backslashreplace")
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stderr, sys.__stderr__):
                handler.setStream(self._python_stderr)
        sys.stderr = self._python_stderr
        self._reader = threading.Thread(target=self._relay, args=(read_end,), name="libvirt-log", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        """Put fd 2 back; the reader relays what libvirt wrote last and ends."""
        if self._original is None:
            return
        os.dup2(self._original, 2)  # closes the pipe's last write end: the reader sees its end
        os.close(self._original)
        self._original = None
        if self._reader is not None:
            self._reader.join(JOIN_SECONDS)

    @staticmethod
    def _relay(read_end: int) -> None:
        with os.fdopen(read_end, "rb") as stream:
            relay_libvirt_stream(stream)


def configure_embedded_log(filters: str | None) -> bool:
    """Have the in-process libvirt log its warnings and errors, and what `filters` let through; False if it cannot.

    Without an output of its own libvirt logs no error (virRaiseErrorLog): one raised in a thread of the driver, with
    no caller to return it to (a QEMU event it gave up on), would leave no trace. KubeVirt's daemon logs them all."""
    if filters is not None:
        os.environ["LIBVIRT_LOG_FILTERS"] = filters
    os.environ["LIBVIRT_LOG_OUTPUTS"] = "1:stderr" if filters is not None else "3:stderr"
    try:
        # A private symbol the daemons use; libvirt's Python binding has no call that sets the log filters.
        set_from_env = ctypes.CDLL("libvirt.so.0").virLogSetFromEnv
    except (OSError, AttributeError):
        log.warning("the embedded libvirt's log cannot be configured with this libvirt: warnings only")
        return False
    set_from_env.restype = ctypes.c_int
    if set_from_env() < 0:
        log.warning("libvirt refused the log filters %r", filters)
        return False
    return True
