"""The launcher's command socket: JSON lines over a unix socket, one request and one answer per line.

virt-handler sends `sync`, `shutdown`, `kill`, `pause`, `unpause`, `softreboot`, `delete`, `status`; `watch` keeps
the connection open and streams the domain's status on every change, so the handler hears about a guest that shut
itself down without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("pykubevirt.launcher.server")

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
MAX_LINE = 4 * 1024 * 1024


class CommandServer:
    """Serves `handlers` by name; `publish()` pushes a status to every watcher."""

    def __init__(self, path: Path, handlers: dict[str, Handler], current_status: Callable[[], dict[str, Any]]) -> None:
        self.path = path
        self.handlers = handlers
        self.current_status = current_status
        self._watchers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_LINE)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for queue in list(self._watchers):
            queue.put_nowait({"closing": True})
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def publish(self, status: dict[str, Any]) -> None:
        for queue in list(self._watchers):
            queue.put_nowait(status)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                try:
                    request = json.loads(line)
                    command = str(request.get("cmd", ""))
                except ValueError:
                    await self._send(writer, {"ok": False, "error": "the request is not JSON"})
                    continue
                if command == "watch":
                    await self._watch(writer)
                    return
                handler = self.handlers.get(command)
                if handler is None:
                    await self._send(
                        writer, {"id": request.get("id"), "ok": False, "error": f"unknown command {command!r}"}
                    )
                    continue
                try:
                    answer = await handler(request)
                    answer = {"id": request.get("id"), "ok": True, **answer}
                except Exception as exc:
                    log.warning("command %s failed: %s", command, exc)
                    answer = {"id": request.get("id"), "ok": False, "error": str(exc) or type(exc).__name__}
                await self._send(writer, answer)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _watch(self, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            await self._send(writer, self.current_status())
            while True:
                status = await queue.get()
                if status.get("closing"):
                    return
                await self._send(writer, status)
        finally:
            self._watchers.discard(queue)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await writer.drain()
