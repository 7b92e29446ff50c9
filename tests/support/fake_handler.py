"""A stand-in for virt-handler's command endpoint in tests: records PUTs, echoes console bytes, greets VNC with RFB.

It speaks the contract virt-api relies on: the address in the Node annotation `pykubevirt.io/virt-handler-address`,
PUT …/{pause,unpause,softreboot,reset} answering 200 or a Status, and websockets …/console, …/vnc and …/usbredir
carrying raw bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import NODES
from pykubevirt.launcher.screenshot_png import ppm_to_png

BASE = c.HANDLER_VMI_PATH
RFB_BANNER = b"RFB 003.008\n"
# The start of a usbredir hello packet (type 0), as QEMU's redirection channel sends it first.
USBREDIR_HELLO = b"\x00\x00\x00\x00fake usb-redir guest"
CONSOLE_GREETING = b"\r\nfake login: "


# What the fake screen looks like: a one-pixel PNG.
SCREEN_PNG = ppm_to_png(b"P6 1 1 255\n" + b"\x10\x20\x30")


class FakeHandler:
    """`await FakeHandler(client, "node01").start()`; `calls` lists (method, path, body) of what it served."""

    def __init__(self, client: KubeClient, node: str, on_command: Callable[[str, str, str], Awaitable[None]]) -> None:
        self.client = client
        self.node = node
        self.on_command = on_command
        self.calls: list[tuple[str, str, bytes]] = []
        self.protocols: list[str | None] = []
        self.failure: tuple[int, dict[str, Any]] | None = None
        self.port = 0
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        for action in ("pause", "unpause", "softreboot", "reset"):
            app.router.add_put(f"{BASE}/{action}", self._command)
        app.router.add_get(f"{BASE}/console", self._stream)
        app.router.add_get(f"{BASE}/vnc", self._stream)
        app.router.add_get(f"{BASE}/usbredir", self._stream)
        app.router.add_get(f"{BASE}/vnc/screenshot", self._screenshot)
        return app

    async def start(self) -> FakeHandler:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        assert site._server is not None
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await self.publish(f"127.0.0.1:{self.port}")
        return self

    async def publish(self, address: str | None) -> None:
        await self.client.patch(
            NODES, self.node, {"metadata": {"annotations": {c.HANDLER_ADDRESS_ANNOTATION: address}}}
        )

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.publish(None)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _command(self, request: web.Request) -> web.Response:
        self.calls.append((request.method, request.path, await request.read()))
        if self.failure is not None:
            code, status = self.failure
            return web.json_response(status, status=code)
        action = request.path.rsplit("/", 1)[1]
        await self.on_command(action, request.match_info["namespace"], request.match_info["name"])
        return web.Response(status=200)

    async def _screenshot(self, request: web.Request) -> web.Response:
        self.calls.append((request.method, request.path_qs, b""))
        return web.Response(body=SCREEN_PNG, content_type="image/png")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.method, request.path_qs, b""))
        ws = web.WebSocketResponse(protocols=("plain.kubevirt.io",))
        await ws.prepare(request)
        self.protocols.append(ws.ws_protocol)
        greetings = {"vnc": RFB_BANNER, "usbredir": USBREDIR_HELLO}
        await ws.send_bytes(greetings.get(request.path.rsplit("/", 1)[1], CONSOLE_GREETING))
        async for message in ws:
            if message.type == WSMsgType.BINARY:
                # The console echoes what it gets, as a guest's tty would.
                await ws.send_bytes(message.data)
        return ws
