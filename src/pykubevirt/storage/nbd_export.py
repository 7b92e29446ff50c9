"""A read-only NBD export of a file still being downloaded: qemu-img reads it as the bytes arrive.

CDI's importer lets qemu-img read an http qcow2 through nbdkit (its curl plugin) instead of staging it on scratch
space when it can. Here the body is fetched once, in order, into the scratch file while qemu-img reads that file
over NBD from a unix socket; a read past what has arrived waits for it. Download and conversion overlap instead of
following one another, whatever the image's layout (a read of a cluster not yet there only waits longer).

The server side of the NBD protocol (NetworkBlockDevice/nbd doc/proto.md) that qemu's client needs: fixed newstyle
handshake, NBD_OPT_GO/INFO (or the old NBD_OPT_EXPORT_NAME), simple replies; reads, flush and disconnect.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import threading
from pathlib import Path

NBD_MAGIC = b"NBDMAGIC"
IHAVEOPT = 0x49484156454F5054
OPTION_REPLY_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1, 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO, OPT_GO = 1, 2, 6, 7
REP_ACK, REP_INFO, REP_ERR_UNSUP = 1, 3, (1 << 31) + 1
INFO_EXPORT = 0
TRANSMISSION_FLAGS = 1 | 2  # HAS_FLAGS, READ_ONLY
CMD_READ, CMD_DISC, CMD_FLUSH = 0, 2, 3
MAX_READ = 32 << 20


class GrowingFile:
    """How much of the file has arrived; readers wait for their range until the download has ended."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self._available = 0
        self._ended = False
        self._cond = threading.Condition()

    def grew(self, available: int) -> None:
        with self._cond:
            self._available = available
            self._cond.notify_all()

    def end(self) -> None:
        """Nothing more arrives (the download is complete, or failed): readers past the end stop waiting."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wait_for(self, end: int) -> bool:
        """Whether bytes up to `end` are there (False: the download ended without them)."""
        with self._cond:
            while self._available < end and not self._ended:
                self._cond.wait()
            return self._available >= end


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the NBD client went away")
        data += chunk
    return bytes(data)


class NBDExport:
    """Serves `growing` on a unix socket at `socket_path` (`nbd+unix:///?socket=…`) until closed."""

    def __init__(self, growing: GrowingFile, socket_path: Path) -> None:
        self.growing = growing
        self.socket_path = socket_path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._threads: list[threading.Thread] = []

    @property
    def uri(self) -> str:
        return f"nbd+unix:///?socket={self.socket_path}"

    def __enter__(self) -> NBDExport:
        self._listener.bind(str(self.socket_path))
        self._listener.listen(4)
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self.growing.end()  # wakes readers still waiting: nothing more will arrive
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name="nbd-export", daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(ConnectionError, OSError):
            if self._handshake(conn):
                self._transmission(conn)

    def _option_reply(self, conn: socket.socket, option: int, kind: int, data: bytes = b"") -> None:
        conn.sendall(struct.pack(">QIII", OPTION_REPLY_MAGIC, option, kind, len(data)) + data)

    def _handshake(self, conn: socket.socket) -> bool:
        conn.sendall(NBD_MAGIC + struct.pack(">QH", IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
        (client_flags,) = struct.unpack(">I", _recv_exact(conn, 4))
        while True:
            _, option, length = struct.unpack(">QII", _recv_exact(conn, 16))
            _recv_exact(conn, length)
            if option == OPT_EXPORT_NAME:
                zeroes = b"" if client_flags & FLAG_NO_ZEROES else bytes(124)
                conn.sendall(struct.pack(">QH", self.growing.size, TRANSMISSION_FLAGS) + zeroes)
                return True
            if option in (OPT_GO, OPT_INFO):
                info = struct.pack(">HQH", INFO_EXPORT, self.growing.size, TRANSMISSION_FLAGS)
                self._option_reply(conn, option, REP_INFO, info)
                self._option_reply(conn, option, REP_ACK)
                if option == OPT_GO:
                    return True
            elif option == OPT_ABORT:
                self._option_reply(conn, option, REP_ACK)
                return False
            else:
                # Structured replies, meta contexts, TLS…: refused, so qemu keeps to simple replies.
                self._option_reply(conn, option, REP_ERR_UNSUP)

    def _transmission(self, conn: socket.socket) -> None:
        fd = -1
        try:
            while True:
                _, _, kind, cookie, offset, length = struct.unpack(">IHHQQI", _recv_exact(conn, 28))
                if kind == CMD_DISC:
                    return
                if kind == CMD_FLUSH:
                    conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, cookie))
                    continue
                if kind != CMD_READ or offset + length > self.growing.size or length > MAX_READ:
                    conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EINVAL, cookie))
                    continue
                if not self.growing.wait_for(offset + length):
                    conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EIO, cookie))
                    continue
                if fd < 0:
                    fd = os.open(self.growing.path, os.O_RDONLY)
                data = os.pread(fd, length, offset)
                conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, cookie) + data.ljust(length, b"\0"))
        finally:
            if fd >= 0:
                os.close(fd)
