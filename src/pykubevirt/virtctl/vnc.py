"""`virtctl vnc`: a local TCP port proxied to the VMI's VNC server, for a viewer (started here unless --proxy-only)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import sys
from pathlib import Path

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.streams import pump_websocket_stream
from pykubevirt.virtctl.client import VirtctlError, error_message, open_stream, subresource_path

REMOTE_VIEWER = "remote-viewer"
TIGER_VNC = "vncviewer"
# Without --proxy-only the viewer must connect within this long (upstream LISTEN_TIMEOUT).
LISTEN_TIMEOUT = 60.0


def _viewer(address: str, port: int) -> list[str]:
    if shutil.which(REMOTE_VIEWER):
        return [REMOTE_VIEWER, f"vnc://127.0.0.1:{port}"]
    if shutil.which(TIGER_VNC):
        return [TIGER_VNC, f"{address}:{port}"]
    raise VirtctlError(f"could not find {REMOTE_VIEWER} or {TIGER_VNC} binary in $PATH")


async def run_vnc(
    client: KubeClient,
    namespace: str,
    name: str,
    *,
    address: str,
    port: int,
    proxy_only: bool,
    preserve_session: bool,
) -> None:
    params = {"preserveSession": "true"} if preserve_session else {}
    try:
        ws = await open_stream(client, namespace, name, "vnc", params)
    except Exception as exc:
        raise VirtctlError(f"can't access VMI {name}: {exc}") from exc
    connected: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await connected.put((reader, writer))

    if not proxy_only:
        address = "127.0.0.1"
    try:
        server = await asyncio.start_server(accept, address, port)
    except OSError as exc:
        await ws.close()
        raise VirtctlError(f"can't listen on unix socket: {exc.strerror or exc}") from exc
    bound = server.sockets[0].getsockname()[1]
    viewer: asyncio.subprocess.Process | None = None
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        if proxy_only:
            print(json.dumps({"port": bound}, separators=(",", ":")), flush=True)
        else:
            command = _viewer(address, bound)
            viewer = await asyncio.create_subprocess_exec(*command)
        waiting = asyncio.create_task(connected.get())
        stop = asyncio.create_task(interrupted.wait())
        await asyncio.wait(
            [waiting, stop], timeout=None if proxy_only else LISTEN_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        stop.cancel()
        if not waiting.done():
            waiting.cancel()
            if interrupted.is_set():
                return
            raise VirtctlError("error encountered: accept tcp: i/o timeout")
        # One viewer session, as upstream: the proxy ends when it does.
        server.close()
        reader, writer = waiting.result()
        try:
            await pump_websocket_stream(ws, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        server.close()
        await ws.close()
        if viewer is not None and viewer.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                viewer.terminate()
            await viewer.wait()
        sys.stdout.flush()


async def run_screenshot(client: KubeClient, namespace: str, name: str, file: str | None, *, move_cursor: bool) -> None:
    """`virtctl vnc screenshot NAME --file F`: the VMI's screen as a PNG, to F or ('-') stdout."""
    if not file:
        raise VirtctlError('required flag(s) "file" not set')
    params = {"moveCursor": "true"} if move_cursor else {}
    path = subresource_path(namespace, "virtualmachineinstances", name, "vnc/screenshot")
    try:
        image = await client.read_bytes(path, params, request_timeout=60)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Can't access VMI {name}: {error_message(exc)}") from exc
    if file == "-":
        sys.stdout.buffer.write(image)
        sys.stdout.buffer.flush()
        return
    try:
        await asyncio.to_thread(Path(file).write_bytes, image)
    except OSError as exc:
        raise VirtctlError(f"Can't write image to a file: {exc}") from exc
