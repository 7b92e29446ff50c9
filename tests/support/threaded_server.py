"""An aiohttp application served over TLS from a thread of the test process, so synchronous tests (kubectl runs)
do not block it: webhooks and aggregated API backends that the API server under test calls."""

from __future__ import annotations

import asyncio
import ssl
import threading
from concurrent.futures import Future

from aiohttp import web


class ThreadedServer:
    """`app` on 127.0.0.1 (a free port) with `context`, in its own event loop; `stop()` ends it."""

    def __init__(self, app: web.Application, context: ssl.SSLContext) -> None:
        self.app = app
        self.context = context
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-backend", daemon=True)

    def start(self) -> ThreadedServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self._runner is not None:
            done: Future[None] = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            done.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
