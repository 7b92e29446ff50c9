"""A UDP server that answers each datagram with what a pure function makes of it: the socket side of the launcher's
DHCP (`dhcp_server.py`) and DHCPv6 (`dhcpv6_server.py`) servers, which differ only in the answer, where it goes and
the line logged for it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, cast

# A socket address: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6.
Address = tuple[Any, ...]


class DatagramResponder(asyncio.DatagramProtocol):
    """Answers each datagram with `respond(data)`, sent to `destination` (None: back to the sender's address), then
    calls `answered(answer)` (the server's log line). A datagram `respond` has no answer for (malformed, or not one
    this server answers) is dropped."""

    def __init__(
        self,
        respond: Callable[[bytes], bytes | None],
        answered: Callable[[bytes], None],
        destination: Address | None = None,
    ) -> None:
        self.respond = respond
        self.answered = answered
        self.destination = destination
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Address) -> None:
        answer = self.respond(data)
        if answer is None or self.transport is None:
            return
        self.transport.sendto(answer, self.destination or addr)
        self.answered(answer)


async def respond_on(
    sock: socket.socket,
    respond: Callable[[bytes], bytes | None],
    answered: Callable[[bytes], None],
    destination: Address | None = None,
) -> asyncio.DatagramTransport:
    """Serve `sock` (bound) with a DatagramResponder until the transport is closed."""
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: DatagramResponder(respond, answered, destination), sock=sock
    )
    return transport
