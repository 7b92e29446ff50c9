"""The HTTPS listener: answers plain HTTP and oversized headers the way kube-apiserver's Go server does.

Go's TLS server looks at the first bytes of a connection: a client speaking plain HTTP gets a 400 with
"Client sent an HTTP request to an HTTPS server." instead of a silent close. Headers beyond the limit get
431 Request Header Fields Too Large, a client's error that needs no traceback in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_request import BaseRequest

log = logging.getLogger("pykubevirt.apiserver")

# What net/http writes when the first record of a TLS connection looks like an HTTP request.
PLAIN_HTTP_REPLY = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
TLS_HANDSHAKE_RECORD = 0x16
# Go's http.DefaultMaxHeaderBytes; aiohttp limits each line to it.
MAX_HEADER_BYTES = 1 << 20
# A client that connects and sends nothing is dropped after this long.
FIRST_BYTES_TIMEOUT_SECONDS = 10.0
HANDSHAKE_TIMEOUT_SECONDS = 10.0


class _RequestHandler(web.RequestHandler):
    """aiohttp's connection handler, answering oversized headers with 431 and logging client errors in one line."""

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if isinstance(exc, LineTooLong):
            log.info("refused a request from %s: header larger than %d bytes", request.remote, MAX_HEADER_BYTES)
            response = web.Response(status=431, text="431 Request Header Fields Too Large")
            response.force_close()
            return response
        if status < 500:
            log.info("refused a malformed request from %s: %s", request.remote, message or exc)
            response = web.Response(status=status, text=f"{status} Bad Request")
            response.force_close()
            return response
        return super().handle_error(request, status, exc, message)


class HTTPSOnlySite(web.BaseSite):
    """Serves the runner's application over TLS on `sock`; connections that do not start TLS get Go's answer."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, ssl_context: ssl.SSLContext) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._sock = sock
        self._accepting: asyncio.Task[None] | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"https://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        self._sock.setblocking(False)
        self._sock.listen(self._backlog)
        self._accepting = asyncio.create_task(self._accept())

    async def stop(self) -> None:
        tasks = [t for t in (self._accepting, *self._connecting) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._sock.close()
        await super().stop()

    def _protocol(self) -> web.RequestHandler:
        server = self._runner.server
        assert server is not None
        options: dict[str, Any] = {
            "access_log": None,
            "max_line_size": MAX_HEADER_BYTES,
            "max_field_size": MAX_HEADER_BYTES,
        }
        return _RequestHandler(server, loop=asyncio.get_running_loop(), **options)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                # Out of descriptors and the like: keep serving the connections there are.
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        handed_over = False
        try:
            first = await asyncio.wait_for(_peek(conn), FIRST_BYTES_TIMEOUT_SECONDS)
            if first and first[0] == TLS_HANDSHAKE_RECORD:
                await loop.connect_accepted_socket(
                    self._protocol, conn, ssl=self._ssl_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_SECONDS
                )
                handed_over = True  # the TLS transport owns the socket now
            elif first[:1].isalpha():
                # Consume what was peeked, or closing with unread data would reset the connection before the
                # client reads the answer.
                conn.recv(65536)
                await loop.sock_sendall(conn, PLAIN_HTTP_REPLY)
                conn.shutdown(socket.SHUT_WR)
        except (OSError, TimeoutError):
            pass  # a failed handshake or a client that went away: nothing to answer
        finally:
            if not handed_over:
                conn.close()


async def _peek(conn: socket.socket) -> bytes:
    """The first bytes a client sent, left in the socket for TLS to read."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv(8, socket.MSG_PEEK)
