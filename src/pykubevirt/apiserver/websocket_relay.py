"""A user's WebSocket relayed message by message to a node's streaming endpoint (exec, port-forward), as
kube-apiserver relays those streams to the kubelet: the node is asked first, so its refusal reaches the user as a
Status before anything is upgraded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import aiohttp
from aiohttp import WSMsgType, web
from yarl import URL

from pykubevirt.api import errors
from pykubevirt.apiserver.pod_logs import CONNECT_TIMEOUT_SECONDS, node_refusal


async def relay_to_node(
    request: web.Request,
    url: str,
    pod: str,
    token: str,
    protocols: Sequence[str],
    *,
    params: Sequence[tuple[str, str]] = (),
    without_upgrade: str,
    default_protocol: str | None = None,
) -> web.WebSocketResponse:
    """Upgrade the user's request to a WebSocket speaking one of `protocols` (`default_protocol` when the user offers
    none; refused without one), connect to the node's `url` with the same one, and relay until either side ends.
    A request that does not upgrade gets `without_upgrade` as a 400, once the node has said it would serve it."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout, headers={"Authorization": f"Bearer {token}"}) as session:
        await ask_node(session, url, pod, params)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise errors.bad_request(without_upgrade)
        client = web.WebSocketResponse(protocols=protocols, max_msg_size=0)
        protocol = client.can_prepare(request).protocol or default_protocol
        if protocol is None:
            raise errors.bad_request(f"unable to upgrade connection: the WebSocket must offer {', '.join(protocols)}")
        try:
            node = await session.ws_connect(url, params=params, protocols=(protocol,), max_msg_size=0)
        except (aiohttp.ClientError, OSError) as exc:
            raise errors.APIError(500, "InternalError", f"unable to upgrade connection: {exc}") from exc
        async with node:
            await client.prepare(request)
            await relay(client, node)
        await client.close()
        return client


async def ask_node(session: aiohttp.ClientSession, url: str, pod: str, params: Sequence[tuple[str, str]] = ()) -> None:
    """Whether the node would serve the stream, asked before anything is upgraded: its refusal as the user's Status,
    or 503 when the node cannot be reached."""
    try:
        async with session.get(url, params=params) as answer:
            if answer.status != 200:
                raise await node_refusal(answer, pod)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        node = URL(url).origin()
        message = f"unable to reach the node of pod {pod} at {node}: {exc}"
        raise errors.APIError(503, "ServiceUnavailable", message) from exc


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
