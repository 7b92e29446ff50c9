"""Byte streams over KubeVirt's `plain.kubevirt.io` websockets (console, VNC), copied both ways until one side ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType

STREAM_PROTOCOL = "plain.kubevirt.io"
READ_SIZE = 65536

Send = Callable[[bytes], Awaitable[Any]]


async def websocket_bytes(ws: AsyncIterable[Any]) -> AsyncIterator[bytes]:
    """The payload of each binary or text message, until the websocket closes or fails."""
    async for message in ws:
        if message.type == WSMsgType.BINARY:
            yield message.data
        elif message.type == WSMsgType.TEXT:
            yield message.data.encode()
        else:
            return


async def stream_bytes(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """What `reader` delivers, in chunks, until end of file."""
    while data := await reader.read(READ_SIZE):
        yield data


def stream_writer(writer: asyncio.StreamWriter) -> Send:
    """A send function writing to `writer` with back-pressure."""

    async def send(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return send


async def _copy(source: AsyncIterable[bytes], send: Send) -> None:
    async for data in source:
        await send(data)


async def pump(a: AsyncIterable[bytes], send_a: Send, b: AsyncIterable[bytes], send_b: Send) -> None:
    """Copy `a` into `send_b` and `b` into `send_a` until either source ends; the other copy is then cancelled."""
    copies = [asyncio.create_task(_copy(a, send_b)), asyncio.create_task(_copy(b, send_a))]
    try:
        await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for copy in copies:
            copy.cancel()
        await asyncio.gather(*copies, return_exceptions=True)


async def pump_websockets(first: Any, second: Any) -> None:
    """Relay between two websockets (aiohttp client or server side) until either closes."""
    await pump(websocket_bytes(first), first.send_bytes, websocket_bytes(second), second.send_bytes)


async def pump_websocket_stream(ws: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Relay between a websocket and a byte stream (unix or TCP socket) until either ends; closes neither."""
    await pump(websocket_bytes(ws), ws.send_bytes, stream_bytes(reader), stream_writer(writer))
