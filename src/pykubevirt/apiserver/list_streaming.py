"""Large lists written in chunks, yielding to the event loop between them, so one LIST does not stall the others.

json.dumps of 5,000 VirtualMachines holds the event loop (and the GIL, so a thread would not help) for a long
time; a chunk of items at a time keeps every stall short, as kube-apiserver's streaming list encoder does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from pykubevirt.api import json_codec

# Lists up to this many items are encoded at once; longer ones are streamed.
STREAM_THRESHOLD = 500
ITEMS_PER_CHUNK = 50


async def write_list(
    request: web.Request,
    head: dict[str, Any],
    items: list[dict[str, Any]],
    *,
    field: str = "items",
    convert: Callable[[list[dict[str, Any]]], list[Any]] | None = None,
) -> web.StreamResponse:
    """Send `{**head, field: items}` as JSON, `ITEMS_PER_CHUNK` items at a time (chunked transfer encoding).

    `convert` turns each chunk of items into the entries written for it (a Table's rows).
    """
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    opening = json.dumps(head, separators=(",", ":"))[:-1] + ("," if head else "") + f'"{field}":['

    try:
        await response.write(opening.encode())
        for start in range(0, len(items), ITEMS_PER_CHUNK):
            # One C call per chunk: the list's brackets are dropped and the chunks joined with commas.
            entries = items[start : start + ITEMS_PER_CHUNK]
            chunk = json_codec.dumps(convert(entries) if convert else entries)[1:-1]
            await response.write(chunk if start == 0 else b"," + chunk)
            # Let requests that arrived meanwhile run before the next chunk.
            await asyncio.sleep(0)
        await response.write(b"]}")
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away mid-list
    return response
