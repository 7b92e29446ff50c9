"""The node's port-forward endpoint: `GET /portForward/{namespace}/{pod}`, a WebSocket carrying SPDY/3.1
(subprotocol `SPDY/3.1+portforward.k8s.io`), what the API server's pods/portforward relays for `kubectl port-forward`
(the kubelet's streaming server). Its caller needs `create nodes/proxy` on this node, as for exec.

kubectl opens two streams a forwarded connection, each with the headers `streamType` (`error` or `data`), `port` and
`requestID`. Once both streams of a request are there, the node connects to localhost:PORT in the pod's network
namespace (a launcher pod's masquerade rules carry loopback on to the guest) and copies bytes both ways until either
side ends, as the container runtime does. A failure goes to the error stream as text, which kubectl prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import WSMsgType, web

from pykubevirt.client.delegated_auth import Decision, status_body
from pykubevirt.log import object_fields
from pykubevirt.node import netns as netns_mod
from pykubevirt.node import spdy_frames as spdy
from pykubevirt.node.log_server import LogError

log = logging.getLogger("pykubevirt.node.port_forward_server")

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
STREAM_CREATION_TIMEOUT_SECONDS = 30.0  # the kubelet's default --streaming-connection... creation timeout
CONNECT_TIMEOUT_SECONDS = 10.0
CLOSE_GRACE_SECONDS = 1.0
READ_CHUNK = 32768
INBOUND_CHUNKS = 64  # a slow pod socket holds the client back here rather than filling memory
ERROR, DATA = "error", "data"

Dial = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@dataclass(frozen=True, slots=True)
class PortForwardTarget:
    """A running pod of this node: its names for messages and the network namespace to connect in (None: the node's)."""

    namespace: str
    name: str
    uid: str
    netns: str | None


class PortForwardSource(Protocol):
    async def authorize(self, authorization: str | None) -> Decision: ...

    def port_forward_target(self, namespace: str, pod: str) -> PortForwardTarget: ...


class ForwardError(Exception):
    """The pod's port could not be reached; the message is what kubectl prints after its own prefix."""


async def dial(target: PortForwardTarget, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to localhost:`port` in the pod's network, IPv4 first and then IPv6, as the container runtime."""
    failures = []
    for family, address, network in ((socket.AF_INET, "127.0.0.1", "tcp4"), (socket.AF_INET6, "::1", "tcp6")):
        try:
            if target.netns is not None:
                sock = await netns_mod.socket_in(target.netns, family)
            else:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setblocking(False)
        except OSError as exc:
            failures.append(f"{network}: {exc.strerror or exc}")
            continue
        try:
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_connect(sock, (address, port)), CONNECT_TIMEOUT_SECONDS)
            return await asyncio.open_connection(sock=sock)
        except (OSError, TimeoutError) as exc:
            sock.close()
            reason = _reason(exc)
            shown = f"[{address}]" if family == socket.AF_INET6 else address
            failures.append(f"dial {network} {shown}:{port}: connect: {reason}")
    where = f' inside namespace "{target.netns}"' if target.netns else ""
    raise ForwardError(f"failed to connect to localhost:{port}{where}, IPv4: {failures[0]} IPv6: {failures[1]}")


@dataclass(slots=True)
class _Stream:
    stream_id: int
    kind: str
    port: int
    inbound: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(INBOUND_CHUNKS))


@dataclass(slots=True)
class _Pair:
    request_id: str
    error: _Stream | None = None
    data: _Stream | None = None
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None


class PortForwardSession:
    """One kubectl's SPDY connection: its stream pairs, each forwarding one TCP connection."""

    def __init__(self, ws: web.WebSocketResponse, target: PortForwardTarget, connect: Dial) -> None:
        self.ws = ws
        self.target = target
        self.connect = connect
        self.reader = spdy.FrameReader()
        self.writer = spdy.FrameWriter()
        self.send_lock = asyncio.Lock()
        self.streams: dict[int, _Stream] = {}
        self.pairs: dict[str, _Pair] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, frame: bytes | Callable[[], bytes]) -> None:
        """Send one frame; a frame with a header block is made under the lock, so blocks go out in deflate order."""
        async with self.send_lock:
            if not self.ws.closed:
                with contextlib.suppress(ConnectionResetError):
                    await self.ws.send_bytes(frame() if callable(frame) else frame)

    async def run(self) -> None:
        try:
            async for message in self.ws:
                if message.type != WSMsgType.BINARY:
                    continue
                for frame in self.reader.feed(message.data):
                    if not await self._handle(frame):
                        return
        except spdy.ProtocolError as exc:
            log.warning("port-forward connection dropped: %s", exc, extra=self.fields())
        finally:
            for pair in self.pairs.values():
                if pair.timer is not None:
                    pair.timer.cancel()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _handle(self, frame: spdy.Frame) -> bool:
        """Act on one frame; False when the client has gone away."""
        if isinstance(frame, spdy.SynStream):
            await self._new_stream(frame)
        elif isinstance(frame, spdy.Data):
            stream = self.streams.get(frame.stream_id)
            if stream is not None and stream.kind == DATA:
                if frame.data:
                    await stream.inbound.put(frame.data)
                if frame.fin:
                    await stream.inbound.put(None)
        elif isinstance(frame, spdy.RstStream):
            self._reset(frame.stream_id)
        elif isinstance(frame, spdy.Ping):
            await self.send(spdy.ping(frame.ping_id))
        elif isinstance(frame, spdy.GoAway):
            return False
        return True

    async def _new_stream(self, frame: spdy.SynStream) -> None:
        problem, port = _stream_problem(frame)
        if problem:
            # spdystream refuses a stream with a finished reply; the kubelet logs why.
            log.info("port-forward stream %d refused: %s", frame.stream_id, problem, extra=self.fields())
            await self.send(lambda: self.writer.syn_reply(frame.stream_id, fin=True))
            return
        kind = frame.header("streamType")
        stream = _Stream(frame.stream_id, kind, port)
        self.streams[frame.stream_id] = stream
        await self.send(lambda: self.writer.syn_reply(frame.stream_id))
        request_id = frame.header("requestID") or _old_client_request_id(frame.stream_id, kind)
        pair = self.pairs.get(request_id)
        if pair is None:
            pair = self.pairs[request_id] = _Pair(request_id)
            loop = asyncio.get_running_loop()
            pair.timer = loop.call_later(STREAM_CREATION_TIMEOUT_SECONDS, self._timed_out, pair)
        if getattr(pair, kind) is not None:
            message = f"error processing stream for request {request_id}: {kind} stream already assigned"
            await self._error_to(pair, message)
            return
        setattr(pair, kind, stream)
        if pair.error is not None and pair.data is not None:
            if pair.timer is not None:
                pair.timer.cancel()
            pair.task = self._spawn(self._forward(pair))

    def _timed_out(self, pair: _Pair) -> None:
        if self.pairs.get(pair.request_id) is pair and pair.task is None:
            del self.pairs[pair.request_id]
            self._spawn(self._error_to(pair, f"(request={pair.request_id}) timed out waiting for streams"))

    def _reset(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        for pair in self.pairs.values():
            if stream in (pair.error, pair.data) and pair.task is not None:
                pair.task.cancel()

    async def _forward(self, pair: _Pair) -> None:
        assert pair.data is not None and pair.error is not None
        port = pair.data.port
        try:
            try:
                reader, writer = await self.connect(port)
            except ForwardError as exc:
                message = f"error forwarding port {port} to pod {self.target.name}, uid {self.target.uid}: {exc}"
                log.info("port-forward to port %d failed: %s", port, exc, extra=self.fields())
                await self.send(spdy.data(pair.error.stream_id, message.encode()))
                return
            up = asyncio.create_task(self._upstream(pair.data, writer))
            down = asyncio.create_task(self._downstream(reader, pair.data.stream_id))
            try:
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                if up.done() and not down.done():
                    # The client is done sending: pass the half-close on and give the answer a moment to finish
                    # (the container runtime gives both directions a second after the first one ends).
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    await asyncio.wait({down}, timeout=CLOSE_GRACE_SECONDS)
            finally:
                for task in (up, down):
                    task.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
                writer.close()
        finally:
            self.pairs.pop(pair.request_id, None)
            for stream in (pair.data, pair.error):
                if self.streams.pop(stream.stream_id, None) is not None:
                    await self.send(spdy.data(stream.stream_id, b"", fin=True))

    async def _upstream(self, stream: _Stream, writer: asyncio.StreamWriter) -> None:
        while (chunk := await stream.inbound.get()) is not None:
            writer.write(chunk)
            await writer.drain()

    async def _downstream(self, reader: asyncio.StreamReader, stream_id: int) -> None:
        while chunk := await reader.read(READ_CHUNK):
            await self.send(spdy.data(stream_id, chunk))

    async def _error_to(self, pair: _Pair, message: str) -> None:
        log.info("port-forward: %s", message, extra=self.fields())
        if pair.error is not None:
            await self.send(spdy.data(pair.error.stream_id, message.encode()))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def fields(self) -> dict[str, object]:
        meta = {"namespace": self.target.namespace, "name": self.target.name}
        return object_fields({"kind": "Pod", "metadata": meta})


def _reason(exc: BaseException) -> str:
    """Go's wording of a failed connect ("connection refused"), not asyncio's ("Connect call failed (…)")."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return "i/o timeout" if isinstance(exc, TimeoutError) else str(exc)


def _stream_problem(frame: spdy.SynStream) -> tuple[str, int]:
    """Why the kubelet would refuse this stream ("" if it would not), and its port."""
    text = frame.header("port")
    if not text:
        return '"port" header is required', 0
    if not text.isdigit() or not 0 < int(text) < 65536:
        return f"unable to parse {text!r} as a port", 0
    kind = frame.header("streamType")
    if not kind:
        return '"streamType" header is required', 0
    if kind not in (ERROR, DATA):
        return f"invalid stream type {kind!r}", 0
    return "", int(text)


def _old_client_request_id(stream_id: int, kind: str) -> str:
    """Clients before requestID opened the error stream, then the data stream right after it."""
    return str(stream_id if kind == ERROR else stream_id - 2)


async def serve_port_forward(request: web.Request, source: PortForwardSource) -> web.StreamResponse:
    """The handler: a refusal as a plain answer before the upgrade; a request without the upgrade only asks whether
    the pod can be forwarded to (200), as the API server does before it upgrades."""
    decision = await source.authorize(request.headers.get("Authorization"))
    if decision.code != 200:
        return web.json_response(status_body(decision), status=decision.code)
    try:
        target = source.port_forward_target(request.match_info["namespace"], request.match_info["pod"])
    except LogError as exc:
        return web.Response(status=exc.status, text=exc.message + "\n")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.Response(text="ok\n")
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=0)
    await ws.prepare(request)
    session = PortForwardSession(ws, target, lambda port: dial(target, port))
    log.info("port-forward connection opened", extra=session.fields())
    try:
        await session.run()
    finally:
        await ws.close()
    return ws
