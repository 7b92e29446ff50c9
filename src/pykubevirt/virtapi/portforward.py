"""The `portforward` subresource of VMIs and VMs: a websocket carrying the bytes of one TCP connection to the guest.

Upstream (pkg/virt-api/rest/portforward.go, dialers.go `netDial`, streamer.go): virt-api itself dials the VMI's first
interface address (`status.interfaces[0].ipAddress`, the pod IP for masquerade and bridge bindings) at the requested
port, and only then upgrades the client's request; each binary message carries raw bytes, both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.api.objects import condition
from pykubevirt.client.streams import STREAM_PROTOCOL, pump, pump_websocket_stream, websocket_bytes
from pykubevirt.virtapi.lifecycle import name_of, vmi_conflict

log = logging.getLogger("pykubevirt.virtapi")

NOT_WEBSOCKET = (
    "websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header"
)
PAUSED = "Paused"
NO_INTERFACES = "no network interfaces are present"
DIAL_TIMEOUT_SECONDS = 10.0
PROTOCOLS = ("tcp", "udp")
QUEUED_DATAGRAMS = 1024


@dataclass(frozen=True, slots=True)
class Target:
    """Where one port-forward goes: a port and protocol of the guest."""

    port: int
    protocol: str = "tcp"


def parse_target(extra: list[str]) -> Target:
    """The path's `PORT[/PROTOCOL]` after `…/portforward/`."""
    if not extra or not extra[0]:
        raise errors.bad_request("port must not be empty")
    if len(extra) > 2:
        raise errors.resource_not_found()
    try:
        port = int(extra[0])
    except ValueError:
        raise errors.bad_request(f'invalid port "{extra[0]}"') from None
    if not 0 < port < 65536:
        raise errors.bad_request(f'invalid port "{extra[0]}"')
    protocol = extra[1].lower() if len(extra) == 2 else "tcp"
    if protocol not in PROTOCOLS:
        raise errors.bad_request(f'unsupported protocol "{extra[1]}"')
    return Target(port, protocol)


def check_port_forward(vmi: dict[str, Any]) -> errors.APIError | None:
    """validateVMIForPortForward: a paused guest does not answer, so upstream refuses before dialing."""
    if condition(vmi, PAUSED) is not None:
        return vmi_conflict(name_of(vmi), "VMI is paused")
    return None


def target_address(vmi: dict[str, Any]) -> str:
    """getTargetInterfaceIP: the first interface's address; 400 when the VMI reports none."""
    interfaces = (vmi.get("status") or {}).get("interfaces") or []
    address = str((interfaces[0] or {}).get("ipAddress") or "") if interfaces else ""
    if not address:
        raise errors.bad_request(NO_INTERFACES)
    return address


def host_port(address: str, port: int) -> str:
    """`ip:port`, with IPv6 addresses bracketed, as Go's net.JoinHostPort writes them."""
    try:
        v6 = ipaddress.ip_address(address).version == 6
    except ValueError:
        v6 = False
    return f"[{address}]:{port}" if v6 else f"{address}:{port}"


async def dial(vmi: dict[str, Any], target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the guest's port; 500 `dialing VM: …` when it cannot be reached."""
    address = target_address(vmi)
    where = host_port(address, target.port)
    try:
        return await asyncio.wait_for(asyncio.open_connection(address, target.port), DIAL_TIMEOUT_SECONDS)
    except TimeoutError:
        raise errors.internal(f"dialing VM: dial {target.protocol} {where}: i/o timeout") from None
    except OSError as exc:
        why = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
        raise errors.internal(f"dialing VM: dial {target.protocol} {where}: connect: {why}") from exc


class GuestDatagrams(asyncio.DatagramProtocol):
    """A UDP socket connected to the guest's port: what it receives, in order, until an error (ICMP unreachable)
    ends it, as a Go UDP conn's Read fails; each websocket message is one datagram, both ways."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUED_DATAGRAMS)
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport, though it is one.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if not self.queue.full():  # UDP: dropped rather than buffered without bound
            self.queue.put_nowait(data)

    def error_received(self, exc: Exception) -> None:
        self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(None)

    async def datagrams(self) -> AsyncIterator[bytes]:
        while (data := await self.queue.get()) is not None:
            yield data

    async def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def dial_udp(vmi: dict[str, Any], target: Target) -> GuestDatagrams:
    """A UDP socket connected to the guest's port (connecting a UDP socket sends nothing)."""
    address = target_address(vmi)
    loop = asyncio.get_running_loop()
    try:
        _, protocol = await loop.create_datagram_endpoint(GuestDatagrams, remote_addr=(address, target.port))
    except OSError as exc:
        why = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
        raise errors.internal(f"dialing VM: dial udp {host_port(address, target.port)}: {why}") from exc
    return protocol


async def forward(request: web.Request, vmi: dict[str, Any], target: Target) -> web.StreamResponse:
    """Dial the guest's port, then accept the client's websocket and pump bytes (upstream's order)."""
    if target.protocol == "udp":
        return await _forward_udp(request, vmi, target)
    reader, writer = await dial(vmi, target)
    client = web.WebSocketResponse(protocols=(STREAM_PROTOCOL,), max_msg_size=0, heartbeat=30)
    try:
        if not client.can_prepare(request).ok:
            raise errors.bad_request(NOT_WEBSOCKET)
        await client.prepare(request)
        meta = vmi["metadata"]
        log.info("port-forward to %s/%s port %d connected", meta.get("namespace"), meta.get("name"), target.port)
        await pump_websocket_stream(client, reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        with contextlib.suppress(Exception):
            await client.close()
    return client


async def _forward_udp(request: web.Request, vmi: dict[str, Any], target: Target) -> web.StreamResponse:
    """UDP: each websocket message is one datagram to the guest's port, each datagram back one message."""
    guest = await dial_udp(vmi, target)
    client = web.WebSocketResponse(protocols=(STREAM_PROTOCOL,), max_msg_size=0, heartbeat=30)
    try:
        if not client.can_prepare(request).ok:
            raise errors.bad_request(NOT_WEBSOCKET)
        await client.prepare(request)
        await pump(websocket_bytes(client), client.send_bytes, guest.datagrams(), guest.send)
    finally:
        guest.close()
        with contextlib.suppress(Exception):
            await client.close()
    return client
