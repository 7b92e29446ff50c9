"""Pass an upstream HTTP answer on to the caller as it arrives (watch streams, logs): the two proxies' common step."""

from __future__ import annotations

from collections.abc import Set

import aiohttp
from aiohttp import web


async def relay(request: web.Request, reply: aiohttp.ClientResponse, dropped: Set[str]) -> web.StreamResponse:
    """Status, headers (less the lowercase names in `dropped`) and body of `reply`, each chunk written once read."""
    response = web.StreamResponse(status=reply.status, reason=reply.reason)
    for name, value in reply.headers.items():
        if name.lower() not in dropped:
            response.headers.add(name, value)
    await response.prepare(request)
    async for chunk in reply.content.iter_any():
        await response.write(chunk)
    await response.write_eof()
    return response
