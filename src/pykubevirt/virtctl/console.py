"""`virtctl console`: the VMI's serial console on this terminal (raw mode, Ctrl+] leaves), or between pipes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import time
import tty
from typing import Any

from aiohttp import WSCloseCode

from pykubevirt.client.api import KubeClient
from pykubevirt.client.streams import websocket_bytes
from pykubevirt.virtctl.client import VirtctlError, open_stream_waiting
from pykubevirt.virtctl.stdio import StdinChunks

ESCAPE = 0x1D  # Ctrl+] (Ctrl+5 sends the same byte on most terminals)
CONNECTED = "Successfully connected to {name} console. Press Ctrl+] or Ctrl+5 to exit console.\n"
DISCONNECTED = (
    "\nYou were disconnected from the console. This could be caused by one of the following:"
    "\n - the target VM was powered off"
    "\n - another user connected to the console of the target VM"
    "\n - network issues\n"
)
# With stdin from a pipe, the guest's answers to the last input are still printed until it is quiet this long.
PIPE_LINGER_SECONDS = 1.0
READ_SIZE = 1024


async def run_console(client: KubeClient, namespace: str, name: str, timeout_minutes: int) -> None:
    ws = await open_stream_waiting(client, namespace, name, "console", timeout_minutes * 60.0)
    try:
        await attach(ws, name)
    finally:
        await ws.close()


async def attach(ws: Any, name: str) -> None:
    """Pump stdin to the guest and the guest to stdout until Ctrl+], end of input, interrupt or disconnection."""
    fd = sys.stdin.fileno()
    is_tty = os.isatty(fd)
    saved = termios.tcgetattr(fd) if is_tty else None
    sys.stderr.write(CONNECTED.format(name=name))
    sys.stderr.flush()
    if is_tty:
        tty.setraw(fd)
    stdin = StdinChunks(fd, READ_SIZE)
    last_output = time.monotonic()
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)

    async def to_guest() -> str:
        while True:
            data = await stdin.read()
            if not data:
                return "eof"
            if ESCAPE in data:
                before = data[: data.index(ESCAPE)]
                if before:
                    await ws.send_bytes(before)
                return "escape"
            await ws.send_bytes(data)

    async def to_stdout() -> None:
        nonlocal last_output
        async for data in websocket_bytes(ws):
            os.write(sys.stdout.fileno(), data)
            last_output = time.monotonic()

    inbound = asyncio.create_task(to_guest())
    outbound = asyncio.create_task(to_stdout())
    stop = asyncio.create_task(interrupted.wait())
    try:
        await asyncio.wait([inbound, outbound, stop], return_when=asyncio.FIRST_COMPLETED)
        if inbound.done() and not inbound.cancelled() and inbound.exception() is None and inbound.result() == "eof":
            eof_at = time.monotonic()
            while not outbound.done() and not stop.done():
                if time.monotonic() - max(last_output, eof_at) >= PIPE_LINGER_SECONDS:
                    break
                await asyncio.wait([outbound, stop], timeout=0.1)
    finally:
        for task in (inbound, outbound, stop):
            task.cancel()
        await asyncio.gather(inbound, outbound, stop, return_exceptions=True)
        stdin.close()
        loop.remove_signal_handler(signal.SIGINT)
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    if not outbound.done() or outbound.cancelled():
        return
    failure = outbound.exception()
    if failure is not None or ws.close_code == WSCloseCode.ABNORMAL_CLOSURE:
        sys.stderr.write(DISCONNECTED)
        raise VirtctlError(str(failure) if failure else "websocket: close 1006 (abnormal closure): unexpected EOF")
