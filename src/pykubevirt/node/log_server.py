"""The node's log endpoint: `GET /containerLogs/{namespace}/{pod}/{container}`, what the API server's pods/log proxies.

It listens on loopback only and is unauthenticated, like the kubelet's old read-only port: anyone on this host
can read container logs through it, nobody elsewhere can reach it (the exec and port-forward endpoints it also
serves, `node/exec_server.py` and `node/port_forward_server.py`, have their caller reviewed). Query parameters
follow the kubelet: `tailLines`, `limitBytes`, `follow` (until the container stops), `timestamps` (RFC 3339
prefixes; logs are stored as plain lines, so lines already written carry the file's modification time),
`sinceSeconds`/`sinceTime` (by the same coarse clock: a file last written before then has nothing to show) and
`previous` (not kept → 400).
A log file not created yet (a guest's serial log before its domain starts) reads as empty; a follow waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from aiohttp import web

log = logging.getLogger("pykubevirt.node.log_server")

FOLLOW_POLL_SECONDS = 0.2
READ_CHUNK = 65536
_TRUE = ("true", "1")


class LogError(Exception):
    """An answer other than the log: HTTP `status` and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class LogTarget:
    path: Path
    # Whether the container is still running (a follow ends once it is not and the file is read to its end).
    running: Callable[[], bool]


class LogSource(Protocol):
    def log_target(self, namespace: str, pod: str, container: str) -> LogTarget: ...


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1e9):09d}Z"


def _int_param(request: web.Request, name: str, minimum: int) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise LogError(400, f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise LogError(400, f"{name} must be at least {minimum}")
    return value


def tail_offset(path: Path, lines: int) -> int:
    """The byte offset where the last `lines` lines of the file begin."""
    size = path.stat().st_size
    if lines == 0 or size == 0:
        return size
    with path.open("rb") as handle:
        handle.seek(size - 1)
        # A final newline ends the last line; it does not start another one.
        position = size - 1 if handle.read(1) == b"\n" else size
        found = 0
        while position > 0:
            step = min(READ_CHUNK, position)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            index = len(block)
            while (index := block.rfind(b"\n", 0, index)) != -1:
                found += 1
                if found == lines:
                    return position + index + 1
    return 0


def _since(request: web.Request) -> float | None:
    """The epoch of sinceSeconds or sinceTime, if given."""
    seconds = _int_param(request, "sinceSeconds", 1)
    if seconds is not None:
        return time.time() - seconds
    raw = request.query.get("sinceTime")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise LogError(400, f"sinceTime must be an RFC 3339 time, got {raw!r}") from None


class _Writer:
    """Writes log bytes to the response, honouring limitBytes and prefixing timestamps per line."""

    def __init__(self, response: web.StreamResponse, limit: int | None, timestamps: bool) -> None:
        self.response = response
        self.remaining = limit
        self.timestamps = timestamps
        self.at_line_start = True

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    async def write(self, data: bytes, epoch: float) -> None:
        if self.timestamps:
            prefix = (_stamp(epoch) + " ").encode()
            out = bytearray()
            for line in data.splitlines(keepends=True):
                if self.at_line_start:
                    out += prefix
                out += line
                self.at_line_start = line.endswith(b"\n")
            data = bytes(out)
        if self.remaining is not None:
            data = data[: self.remaining]
            self.remaining -= len(data)
        if data:
            await self.response.write(data)


class LogServer:
    """aiohttp server of container logs for one node agent, on 127.0.0.1."""

    def __init__(self, source: LogSource, port: int = 0, host: str = "127.0.0.1") -> None:
        self.source = source
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        # More of the kubelet's endpoints on this server (exec, port-forward), as (path, handler) added before start.
        self.routes: list[tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        for path, handler in self.routes:
            app.router.add_get(path, handler)
        app.router.add_get("/healthz", self._health)
        return app

    async def start(self) -> int:
        # handler_cancellation: a reader that disconnects ends its follow at once instead of at the container's end.
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        log.info("serving container logs on http://%s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        pod = request.match_info["pod"]
        container = request.match_info["container"]
        try:
            if request.query.get("previous", "").lower() in _TRUE:
                raise LogError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
            tail = _int_param(request, "tailLines", 0)
            limit = _int_param(request, "limitBytes", 1)
            since = _since(request)
            target = self.source.log_target(namespace, pod, container)
        except LogError as exc:
            return web.Response(status=exc.status, text=exc.message + "\n")
        follow = request.query.get("follow", "").lower() in _TRUE
        timestamps = request.query.get("timestamps", "").lower() in _TRUE
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain; charset=utf-8"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        writer = _Writer(response, limit, timestamps)
        if since is not None and target.path.exists() and target.path.stat().st_mtime < since:
            tail = 0  # nothing written since then; a follow still shows what comes
        try:
            await self._stream(target, writer, tail, follow)
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the reader went away
        return response

    async def _stream(self, target: LogTarget, writer: _Writer, tail: int | None, follow: bool) -> None:
        path = target.path
        existed = path.exists()
        while not path.exists():
            if not follow or not target.running():
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
        offset = tail_offset(path, tail) if tail is not None and existed else 0
        with path.open("rb") as handle:
            handle.seek(offset)
            # Lines written before the request carry the file's modification time, later ones their arrival.
            stamp: float | None = os.fstat(handle.fileno()).st_mtime if existed else None
            while not writer.exhausted:
                chunk = handle.read(READ_CHUNK)
                if chunk:
                    await writer.write(chunk, stamp if stamp is not None else time.time())
                    continue
                if not follow:
                    return
                stamp = None
                if not target.running():
                    # One more read: the last words of a process may land after our previous read.
                    chunk = handle.read()
                    if chunk:
                        await writer.write(chunk, time.time())
                    return
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
