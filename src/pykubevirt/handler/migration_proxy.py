"""The handlers' migration proxies: unix sockets in the pods, TCP between the nodes (KubeVirt's migration-proxy.go).

The source handler listens on `pod_layout.migration_socket(uid[, port])` for the source's libvirt and QEMU and dials
the target node's address; the target handler listens there (`targetNodeAddress`, `targetDirectMigrationNodePorts`)
and dials the target pod's libvirt socket and the sockets its QEMU listens on. Unix sockets cross the pods' network
namespaces, so the launchers need no route to each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger("pykubevirt.handler.migration")

BUFFER = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(BUFFER):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


Dial = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def dial_unix(path: str) -> Dial:
    return lambda: asyncio.open_unix_connection(path)


def dial_tcp(host: str, port: int) -> Dial:
    return lambda: asyncio.open_connection(host, port)


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
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        if self.path:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
            self._server = await asyncio.start_unix_server(self._serve, path=self.path)
            log.info("migration proxy %s → %s", self.path, self.shown)
            return 0
        self._server = await asyncio.start_server(self._serve, host=self.address, port=0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("migration proxy %s:%d → %s", self.address, self.port, self.shown)
        return self.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await self.dial()
        except OSError as exc:
            log.warning("migration proxy: %s unreachable: %s", self.shown, exc)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
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
