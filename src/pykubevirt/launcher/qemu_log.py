"""QEMU's own log relayed into the launcher's JSON log (`subcomponent: qemu`), as KubeVirt's virt-launcher does.

libvirt keeps a log per domain (`<log dir>/qemu/<domain>.log`): the command line it started QEMU with, what QEMU
itself writes to stderr (a device's warning, "terminating on signal 15 from pid …"), and why the guest stopped
("shutting down, reason=crashed"). It lives in the launcher's runtime directory, which goes with the pod, so without
the relay those lines never reach `kubectl logs`. The file is followed through inotify: an idle guest costs no read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
from pathlib import Path
from typing import Any

from pykubevirt.launcher.guest_panic import panic_info

log = logging.getLogger("pykubevirt.launcher.qemu_log")
# Every line QEMU's log holds is shown, at info, whatever level the launcher's own lines are filtered at.
relayed = logging.getLogger("pykubevirt.launcher.qemu")
relayed.setLevel(logging.INFO)

# inotify(7): a change to any file in the watched directory, or one created or moved into it.
_IN_MODIFY = 0x002
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_WATCHED = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE
# A line longer than this (KubeVirt's scanner limit) is logged in pieces rather than held without end.
MAX_LINE_BYTES = 512 * 1024
_READ_BYTES = 64 * 1024


def qemu_log_path(log_dir: Path, domain: str) -> Path:
    """Where libvirt writes `domain`'s QEMU log under a libvirt log directory (`/var/log/libvirt` or `<root>/log`)."""
    return log_dir / "qemu" / f"{domain}.log"


class QemuLogLines:
    """Bytes of the log in, messages out: one a line, and QEMU's command line (continued with a trailing backslash
    on each line) as one message, as KubeVirt shows it."""

    def __init__(self) -> None:
        self._partial = b""
        self._continued: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        *complete, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > MAX_LINE_BYTES:
            complete.append(self._partial)
            self._partial = b""
        return [message for line in complete if (message := self._message(line)) is not None]

    def flush(self) -> list[str]:
        """What is held back at the end: a last line without its newline, or a command line cut short."""
        messages = self.feed(b"\n") if self._partial else []
        if self._continued:
            messages.append(" ".join(self._continued))
            self._continued = []
        return messages

    def _message(self, line: bytes) -> str | None:
        text = line.decode(errors="replace").rstrip("\r")
        if not text.strip():
            return None
        if text.endswith("\\"):
            self._continued.append(text[:-1].strip())
            return None
        if self._continued:
            text = " ".join([*self._continued, text.strip()])
            self._continued = []
        return text


class QemuLogRelay:
    """Follows one domain's QEMU log from `start()` on the running loop until `stop()`, which relays the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = QemuLogLines()
        self._file: int | None = None
        self._inode: int | None = None
        self._inotify: int | None = None
        # The last panic libvirt noted in the log ("panic hyper-v: arg1=…"), for the guest's panic report.
        self.last_panic: dict[str, Any] | None = None

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._inotify = _watch(self.path.parent)
        except OSError as exc:
            # The log is still relayed when the launcher ends, as KubeVirt's launcher monitor dumps it.
            log.warning("cannot follow QEMU's log (%s); it is relayed when the launcher ends", exc)
        else:
            asyncio.get_running_loop().add_reader(self._inotify, self._on_change)
        self._relay_new()

    def stop(self) -> None:
        if self._inotify is not None:
            with contextlib.suppress(RuntimeError):  # the loop may already be closed
                asyncio.get_running_loop().remove_reader(self._inotify)
            os.close(self._inotify)
            self._inotify = None
        self._relay_new()
        self._emit(self._lines.flush())
        if self._file is not None:
            os.close(self._file)
            self._file = None

    def catch_up(self) -> dict[str, Any] | None:
        """Relay what the log holds now (a crash event may come before inotify's); returns the last panic noted."""
        self._relay_new()
        return self.last_panic

    def _on_change(self) -> None:
        assert self._inotify is not None
        # The events only say that something changed; the file itself says what.
        with contextlib.suppress(BlockingIOError):
            while os.read(self._inotify, 4096):
                pass
        self._relay_new()

    def _relay_new(self) -> None:
        try:
            self._follow_current_file()
            while self._file is not None and (data := os.read(self._file, _READ_BYTES)):
                self._emit(self._lines.feed(data))
        except OSError as exc:
            log.warning("reading QEMU's log %s failed: %s", self.path, exc)

    def _follow_current_file(self) -> None:
        """Open the log once it exists; after a truncation read from its start, after a new file from the new one's."""
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return
        if self._file is not None and current.st_ino == self._inode:
            if current.st_size < os.lseek(self._file, 0, os.SEEK_CUR):
                os.lseek(self._file, 0, os.SEEK_SET)
            return
        if self._file is not None:
            while data := os.read(self._file, _READ_BYTES):  # the rest of the file that was replaced
                self._emit(self._lines.feed(data))
            os.close(self._file)
        self._file = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self._inode = os.fstat(self._file).st_ino

    def _emit(self, messages: list[str]) -> None:
        for message in messages:
            relayed.info("%s", message, extra={"subcomponent": "qemu", "position": None})
            if (panic := panic_info(message)) is not None:
                self.last_panic = panic


def _watch(directory: Path) -> int:
    """A non-blocking inotify descriptor watching `directory` for changed, created and moved-in files."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
    if libc.inotify_add_watch(fd, os.fsencode(directory), ctypes.c_uint32(_WATCHED)) < 0:
        errno = ctypes.get_errno()
        os.close(fd)
        raise OSError(errno, f"inotify_add_watch {directory}: {os.strerror(errno)}")
    return fd
