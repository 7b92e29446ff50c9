"""The launcher's command socket: JSON lines over a unix socket, one request and one answer per line.

virt-handler sends the commands of `launcher.protocol.Command`; `watch` keeps the connection open and streams the
domain's status on every change, so the handler hears about a guest that shut itself down without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from pykubevirt.launcher import protocol
from pykubevirt.launcher.protocol import Command, ProtocolMismatch, Request, Status

log = logging.getLogger("pykubevirt.launcher.server")

Handler = Callable[[Request], Awaitable[Mapping[str, Any]]]

STOP_TIMEOUT_SECONDS = 5.0


class CommandServer:
    """Serves `handlers` by command; `publish()` pushes a status to every watcher."""

    def __init__(self, path: Path, handlers: dict[Command, Handler], current_status: Callable[[], Status]) -> None:
        self.path = path
        self.handlers = handlers
        self.current_status = current_status
        # The watchers' connections, in the order they registered: publish() writes to all of them in one go and in
        # that order. One go is several sends, and a process can stop between two (a kill); in order, a watcher that
        # has a status knows that every watcher registered before it was sent it too.
        self._watchers: dict[asyncio.StreamWriter, None] = {}
        self._server: asyncio.AbstractServer | None = None
        # Open connections, so stop() can end them and wait for the commands they are answering.
        self._connections: dict[asyncio.Task[Any], asyncio.StreamReader] = {}

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=protocol.MAX_LINE)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        """Stop listening, end every connection and wait for the commands under way.

        The launcher closes libvirt right after this; a command still running then would fail on a closed
        connection instead of the handler seeing the launcher go away. (Python 3.11's wait_closed() does not wait
        for open connections.)
        """
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for reader in list(self._connections.values()):
            # The next read ends the connection; an answer under way is still sent first.
            reader.feed_eof()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=STOP_TIMEOUT_SECONDS)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def publish(self, status: Status) -> None:
        data = protocol.encode(status)
        for writer in list(self._watchers):
            if not writer.is_closing():
                writer.write(data)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = reader
        try:
            while True:
                line = await reader.readline()
                if not line or self._server is None or not self._server.is_serving():
                    return
                try:
                    message = protocol.decode(line)
                except ValueError:
                    await self._send(writer, protocol.error_reply("the request is not JSON"))
                    continue
                request_id = message.get("id")
                try:
                    protocol.check_version(message, "virt-handler")
                except ProtocolMismatch as exc:
                    log.warning("refused a request: %s", exc)
                    await self._send(writer, protocol.error_reply(str(exc), request_id))
                    continue
                request = protocol.parse_request(message)
                if request["cmd"] == Command.WATCH:
                    await self._watch(reader, writer)
                    return
                await self._send(writer, await self._answer(request, request_id))
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if task is not None:
                self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, request: Request, request_id: Any) -> Mapping[str, Any]:
        command = request["cmd"]
        try:
            handler = self.handlers.get(Command(command))
        except ValueError:
            handler = None
        if handler is None:
            return protocol.error_reply(f"unknown command {command!r}", request_id)
        try:
            answer = await handler(request)
        except Exception as exc:
            log.warning("command %s failed: %s", command, exc)
            return protocol.error_reply(str(exc) or type(exc).__name__, request_id)
        return {"id": request_id, "ok": True, "protocolVersion": protocol.PROTOCOL_VERSION, **answer}

    async def _watch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The current status and the watcher's registration happen with no await between them, so no change
        # published meanwhile is lost or sent before it.
        writer.write(protocol.encode(self.current_status()))
        self._watchers[writer] = None
        try:
            await writer.drain()
            # A watcher sends nothing more: its end of file (or stop()'s) ends the watch.
            while await reader.read(protocol.MAX_LINE):
                pass
        finally:
            self._watchers.pop(writer, None)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, message: object) -> None:
        writer.write(protocol.encode(message))
        await writer.drain()
