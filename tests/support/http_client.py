"""A tiny HTTPS client for the API server in tests: aiohttp with the server's CA and a bearer token."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.support.apiserver_process import APIServerProcess

JSON = "application/json"
MERGE = "application/merge-patch+json"


@dataclass
class Reply:
    """One answer: status code, headers and the body (parsed as JSON when it is JSON)."""

    status: int
    headers: dict[str, str]
    warnings: list[str]
    body: Any

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""


class APIClient:
    """`async with APIClient(server) as api:` then `await api.get(path)`, `api.post(path, obj)`, …"""

    def __init__(
        self, server: APIServerProcess | None, token: str | None = "", *, url: str = "", ca_file: str = ""
    ) -> None:
        """`token` "" means the server's admin token, None no Authorization header at all."""
        if server is not None:
            url = url or server.url
            ca_file = ca_file or str(server.ca_file())
            token = server.token() if token == "" else token
        self.url = url
        self.token = token
        self.ca_file = ca_file
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> APIClient:
        context = ssl.create_default_context(cafile=self.ca_file)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}
        self.session = aiohttp.ClientSession(
            base_url=self.url,
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=context, limit=64),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        raw: bytes | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        assert self.session is not None
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        all_headers = dict(headers or {})
        if data is not None:
            all_headers["Content-Type"] = content_type
        async with self.session.request(method, path, data=data, params=params, headers=all_headers) as response:
            text = await response.text()
            try:
                parsed: Any = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return Reply(
                response.status,
                dict(response.headers),
                response.headers.getall("Warning", []),
                parsed,
            )

    async def get(self, path: str, **params: str) -> Reply:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: Any, **params: str) -> Reply:
        return await self.request("POST", path, body, params=params or None)

    async def put(self, path: str, body: Any, **params: str) -> Reply:
        return await self.request("PUT", path, body, params=params or None)

    async def patch(self, path: str, body: Any, content_type: str = MERGE, **params: str) -> Reply:
        return await self.request("PATCH", path, body, content_type=content_type, params=params or None)

    async def delete(self, path: str, body: Any = None, **params: str) -> Reply:
        return await self.request("DELETE", path, body, params=params or None)

    async def names(self, path: str, **params: str) -> list[str]:
        """The names a LIST of `path` returns (asserting it succeeds)."""
        reply = await self.get(path, **params)
        assert reply.status == 200, reply.body
        return sorted(item["metadata"]["name"] for item in reply.body["items"])

    async def watch(
        self, path: str, opened: asyncio.Event | None = None, **params: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The events of a watch, one dict per line, until the server ends the stream or the caller stops.

        `opened` is set once the server answered 200: from then on the watch sees every change.
        """
        assert self.session is not None
        query = {"watch": "true", **params}
        async with self.session.get(path, params=query, timeout=aiohttp.ClientTimeout(total=None)) as response:
            assert response.status == 200, await response.text()
            if opened is not None:
                opened.set()
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
