"""The handlers' migration proxies: unix sockets in the pods, TCP between the nodes (KubeVirt's migration-proxy.go).

The source handler listens on `pod_layout.migration_socket(uid[, port])` for the source's libvirt and QEMU and dials
the target node's address; the target handler listens there (`targetNodeAddress`, `targetDirectMigrationNodePorts`)
and dials the target pod's libvirt socket and the sockets its QEMU listens on. Unix sockets cross the pods' network
namespaces, so the launchers need no route to each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("pykubevirt.handler.migration")

# Bytes one splice moves at most: the pipe's capacity is raised to this where the kernel allows.
CHUNK = 1024 * 1024
F_SETPIPE_SZ = 1031


def _splice(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until EOF through a pipe with splice(2): the bytes never enter Python.

    The memory stream is the guest's whole RAM; relaying it through Python buffers in two handlers took more CPU
    than the QEMUs on a loaded host (a third of the libvirt job's time)."""
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, F_SETPIPE_SZ, CHUNK)
        while moved := os.splice(source.fileno(), write_end, CHUNK):
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
    except OSError:
        # One side broke: neither direction can go on.
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(read_end)
        os.close(write_end)


def relay(client: socket.socket, upstream: socket.socket) -> None:
    """Both directions between two connected blocking sockets until both reach EOF; then both are closed."""
    back = threading.Thread(target=_splice, args=(upstream, client), daemon=True, name="migration-proxy")
    back.start()
    try:
        _splice(client, upstream)
        back.join()
    finally:
        client.close()
        upstream.close()


Dial = Callable[[], socket.socket]


def dial_unix(path: str) -> Dial:
    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    return dial


def dial_tcp(host: str, port: int) -> Dial:
    return lambda: socket.create_connection((host, port))


class MigrationProxy:
    """Forwards every connection it accepts (TCP on `address`, or the unix socket `path`) to what `dial` opens."""

    def __init__(self, dial: Dial, *, address: str = "", path: str = "", shown: str = "", role: int = 0) -> None:
        self.dial = dial
        # The port it stands for (targetDirectMigrationNodePorts: 0 libvirt, 49152 memory, 49153 block copy).
        self.role = role
        self.address = address
        self.path = path
        self.shown = shown
        self.port = 0
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None

    async def start(self) -> int:
        if self.path:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(self.path)
        else:
            listener = socket.create_server((self.address, 0))
            self.port = int(listener.getsockname()[1])
        listener.listen(16)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.get_running_loop().create_task(self._accept(listener))
        log.info("migration proxy %s → %s", self.path or f"{self.address}:{self.port}", self.shown)
        return self.port

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, _ = await loop.sock_accept(listener)
            client.setblocking(True)
            # Each connection is relayed by threads of its own for as long as it lasts (the executor's few
            # threads are for short calls).
            threading.Thread(target=self._serve, args=(client,), daemon=True, name="migration-proxy").start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self.dial()
        except OSError as exc:
            log.warning("migration proxy: %s unreachable: %s", self.shown, exc)
            client.close()
            return
        relay(client, upstream)

    async def stop(self) -> None:
        """No new connections; those under way run to their end."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()


class ProxySet:
    """The proxies of one migration, stopped together."""

    def __init__(self) -> None:
        self.proxies: list[MigrationProxy] = []

    async def add(self, proxy: MigrationProxy) -> MigrationProxy:
        await proxy.start()
        self.proxies.append(proxy)
        return proxy

    async def stop(self) -> None:
        for proxy in self.proxies:
            await proxy.stop()
        self.proxies.clear()
