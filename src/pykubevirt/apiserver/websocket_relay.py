"""A WebSocket relayed message by message between a user and a node, as kube-apiserver relays exec and port-forward
streams to the kubelet."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import WSMsgType, web


async def relay(client: web.WebSocketResponse, node: aiohttp.ClientWebSocketResponse) -> None:
    """Pass every binary message on in both directions until either side closes."""

    async def to_node() -> None:
        async for message in client:
            if message.type == WSMsgType.BINARY:
                await node.send_bytes(message.data)
        await node.close()

    async def to_client() -> None:
        async for message in node:
            if message.type == WSMsgType.BINARY and not client.closed:
                await client.send_bytes(message.data)
        await client.close()

    tasks = [asyncio.create_task(to_node()), asyncio.create_task(to_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionResetError, aiohttp.ClientError):
                await task
