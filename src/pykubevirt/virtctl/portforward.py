"""`virtctl port-forward TYPE/NAME[/NAMESPACE] [PROTOCOL/]LOCAL[:REMOTE]...` (pkg/virtctl/portforward).

Each accepted local connection gets its own websocket on the VMI's (or VM's) `portforward/PORT/PROTOCOL`
subresource; `--stdio` carries a single port over stdin and stdout instead (what `virtctl ssh` uses as ProxyCommand).
Since KubeVirt 1.7 a dot in the target is part of the name, never a namespace separator.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import aiohttp

from pykubevirt.client.api import KubeClient
from pykubevirt.client.streams import pump, pump_websocket_stream, websocket_bytes
from pykubevirt.virtctl.client import VirtctlError, open_stream
from pykubevirt.virtctl.stdio import StdinChunks, reader_gone, write_all

VM, VMI = "vm", "vmi"
KINDS = {
    **dict.fromkeys(("vm", "vms", "virtualmachine", "virtualmachines"), VM),
    **dict.fromkeys(("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances"), VMI),
}
RESOURCES = {VM: "virtualmachines", VMI: "virtualmachineinstances"}
PROTOCOLS = ("tcp", "udp")


@dataclass(frozen=True, slots=True)
class ForwardTarget:
    kind: str
    name: str
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ForwardedPort:
    local: int
    remote: int
    protocol: str = "tcp"


def normalize_kind(kind: str) -> str:
    found = KINDS.get(kind.lower())
    if found is None:
        raise VirtctlError(f"unsupported resource type '{kind}'")
    return found


def parse_target(target: str) -> ForwardTarget:
    """`type/name[/namespace]`, with upstream's error texts."""
    if not target:
        raise VirtctlError("target cannot be empty")
    parts = target.split("/")
    if len(parts) == 1:
        raise VirtctlError("target must contain type and name separated by '/'")
    if len(parts) > 3:
        raise VirtctlError("target is not valid with more than two '/'")
    namespace = ""
    if len(parts) == 3:
        namespace = parts[2]
        if not namespace:
            raise VirtctlError("namespace cannot be empty")
    kind = normalize_kind(parts[0])
    if not parts[1]:
        raise VirtctlError("name cannot be empty")
    return ForwardTarget(kind, parts[1], namespace)


def _port_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise VirtctlError(f'strconv.Atoi: parsing "{text}": invalid syntax') from None


def parse_port(arg: str) -> ForwardedPort:
    """`[protocol/]local[:remote]`; the remote port defaults to the local one, the protocol to tcp."""
    protocol = "tcp"
    if "/" in arg:
        protocol, arg = arg.split("/", 1)[0], arg.split("/", 1)[1]
    ports = [p for p in arg.split(":") if p]
    if not ports:
        raise VirtctlError("invalid port, missing local and/or remote port")
    local = _port_number(ports[0])
    remote = _port_number(ports[1]) if len(ports) > 1 else local
    return ForwardedPort(local, remote, protocol)


def stream_path(port: ForwardedPort) -> str:
    return f"portforward/{port.remote}/{port.protocol}"


def log(message: str) -> None:
    """Progress goes to stderr: with --stdio, stdout carries the tunnel."""
    print(message, file=sys.stderr, flush=True)


class PortForwarder:
    """Opens one websocket per connection to the target's portforward subresource."""

    def __init__(self, client: KubeClient, namespace: str, target: ForwardTarget) -> None:
        self.client = client
        self.namespace = namespace
        self.target = target
        # The UDP tunnels' tasks, held until they end.
        self.tunnels: set[asyncio.Task[None]] = set()

    async def open(self, port: ForwardedPort) -> aiohttp.ClientWebSocketResponse:
        resource = RESOURCES[self.target.kind]
        return await open_stream(self.client, self.namespace, self.target.name, stream_path(port), resource=resource)

    async def stdio(self, port: ForwardedPort) -> None:
        """One tunnel between this process's stdin/stdout and the guest port, until the guest's side ends.

        End of input only stops sending (a websocket cannot half-close): the answer still arrives, so
        `printf 'GET / …' | virtctl port-forward --stdio` prints the page. ssh kills its ProxyCommand when it exits.
        """
        ws = await self.open(port)
        stdin = StdinChunks(sys.stdin.fileno())
        out = sys.stdout.fileno()

        async def to_guest() -> None:
            async for data in stdin.chunks():
                await ws.send_bytes(data)
            # The answer may still come, unless whoever reads it has gone as well: ssh closes both ends of its
            # ProxyCommand when it exits, and its SIGHUP is lost when this process inherited SIGHUP ignored (nohup).
            # The guest's side would then keep the tunnel open until its own timeout.
            await reader_gone(out)

        async def to_stdout() -> None:
            async for data in websocket_bytes(ws):
                await write_all(out, data)

        sending = asyncio.create_task(to_guest())
        receiving = asyncio.create_task(to_stdout())
        try:
            await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
            if receiving.done():
                receiving.result()
        finally:
            for task in (sending, receiving):
                task.cancel()
            await asyncio.gather(sending, receiving, return_exceptions=True)
            stdin.close()
            await ws.close()

    async def _connection(
        self, port: ForwardedPort, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        log(f"opening new tcp tunnel to {port.remote}")
        try:
            ws = await self.open(port)
        except Exception as exc:
            target = self.target
            log(f"can't access {target.kind}/{target.name}.{self.namespace}: {exc}")
            writer.close()
            return
        log(f"handling tcp connection for {port.local}")
        try:
            await pump_websocket_stream(ws, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            await ws.close()

    async def listen(self, address: str, port: ForwardedPort) -> asyncio.AbstractServer | asyncio.BaseTransport:
        """Bind the local port; upstream's `forwarding …` line follows, so whoever reads it may connect at once."""
        if port.protocol not in PROTOCOLS:
            raise VirtctlError(f"unknown protocol: {port.protocol}")
        if port.protocol == "udp":
            listening: asyncio.AbstractServer | asyncio.BaseTransport = await self._listen_udp(address, port)
        else:

            async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._connection(port, reader, writer)

            try:
                listening = await asyncio.start_server(accept, address, port.local)
            except OSError as exc:
                why = (exc.strerror or str(exc)).lower()
                raise VirtctlError(f"listen tcp {address}:{port.local}: bind: {why}") from exc
        log(f"forwarding {port.protocol} {address}:{port.local} to {port.remote}")
        return listening

    async def _listen_udp(self, address: str, port: ForwardedPort) -> asyncio.BaseTransport:
        """upstream's udpProxy: each local client address gets its own stream; a message is one datagram."""
        loop = asyncio.get_running_loop()
        forwarder = self
        clients: dict[Any, asyncio.Queue[bytes]] = {}

        class Local(asyncio.DatagramProtocol):
            transport: asyncio.DatagramTransport

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                # The selector loop's datagram transport does not subclass DatagramTransport, though it is one.
                self.transport = cast(asyncio.DatagramTransport, transport)

            def datagram_received(self, data: bytes, addr: Any) -> None:
                queue = clients.get(addr)
                if queue is None:
                    queue = clients[addr] = asyncio.Queue()
                    task = loop.create_task(forwarder._udp_client(port, self.transport, addr, queue, clients))
                    forwarder.tunnels.add(task)
                    task.add_done_callback(forwarder.tunnels.discard)
                queue.put_nowait(data)

        try:
            transport, _ = await loop.create_datagram_endpoint(Local, local_addr=(address, port.local))
        except OSError as exc:
            why = (exc.strerror or str(exc)).lower()
            raise VirtctlError(f"listen udp {address}:{port.local}: bind: {why}") from exc
        return transport

    async def _udp_client(
        self,
        port: ForwardedPort,
        local: asyncio.DatagramTransport,
        addr: Any,
        queue: asyncio.Queue[bytes],
        clients: dict[Any, asyncio.Queue[bytes]],
    ) -> None:
        log(f"opening new udp tunnel to {port.remote}")
        try:
            ws = await self.open(port)
        except Exception as exc:
            log(f"can't access {self.target.kind}/{self.target.name}.{self.namespace}: {exc}")
            clients.pop(addr, None)
            return

        async def outgoing() -> AsyncIterator[bytes]:
            while True:
                yield await queue.get()

        async def to_client(data: bytes) -> None:
            local.sendto(data, addr)

        try:
            await pump(outgoing(), to_client, websocket_bytes(ws), ws.send_bytes)
        finally:
            clients.pop(addr, None)
            await ws.close()


async def run_port_forward(
    client: KubeClient, namespace: str, target_arg: str, port_args: list[str], *, address: str, stdio: bool
) -> None:
    target = parse_target(target_arg)
    ports = [parse_port(arg) for arg in port_args]
    forwarder = PortForwarder(client, target.namespace or namespace, target)
    if stdio:
        if len(ports) != 1:
            raise VirtctlError("only one port supported when forwarding to stdout")
        await forwarder.stdio(ports[0])
        return
    servers = [await forwarder.listen(address, port) for port in ports]
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, interrupted.set)
    try:
        await interrupted.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        for server in servers:
            server.close()
