"""An async Kubernetes API client on aiohttp: JSON only, typed errors, watches as async iterators.

It speaks plain Kubernetes REST, so it works the same against the embedded server and a real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from pykubevirt.api import json_codec
from pykubevirt.client.config import ClientConfig
from pykubevirt.client.errors import ApiError, Gone, NotFound, error_for
from pykubevirt.client.resources import ResourceRef
from pykubevirt.metrics import rest_client

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# A token file is read again after this long, as client-go's cached file token source does (tokens rotate slowly).
TOKEN_REREAD_SECONDS = 60.0

Object = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: Object


class TokenBucket:
    """client-go's QPS/burst limiter: waits when more than `burst` requests arrive faster than `qps` a second."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self.updated = time.monotonic()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.qps)
            self.updated = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


class KubeClient:
    """One HTTP session to one API server; create with `KubeClient.connect(config)` and `close()` when done."""

    def __init__(
        self, config: ClientConfig, *, qps: float = 200, burst: int = 400, user_agent: str = "pykubevirt"
    ) -> None:
        self.config = config
        self._limiter = TokenBucket(qps, burst)
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._token = ""
        self._token_read_at = -TOKEN_REREAD_SECONDS

    @property
    def base_url(self) -> str:
        """Where requests go: the server's URL, or plain HTTP over its unix socket when that is on this host."""
        return "http://localhost" if isinstance(self.session.connector, aiohttp.UnixConnector) else self.config.server

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector: aiohttp.BaseConnector
            if self.config.local_socket and os.access(self.config.local_socket, os.R_OK | os.W_OK):
                # The socket is the server's own (0600 in its 0700 data directory), so TLS would protect nothing;
                # it cost virt-controller 8 % of its CPU at 50 VM starts/s.
                connector = aiohttp.UnixConnector(self.config.local_socket, limit=64)
            else:
                connector = aiohttp.TCPConnector(ssl=self.config.ssl_context(), limit=64)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                headers={"User-Agent": self._user_agent},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --------------------------------------------------------------------------------------------------- transport

    def _bearer_token(self) -> str:
        if not self.config.token_file:
            return self.config.token
        now = time.monotonic()
        if now - self._token_read_at >= TOKEN_REREAD_SECONDS:
            self._token = self.config.bearer_token()
            self._token_read_at = now
        return self._token

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self._bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float = 60.0,
    ) -> Any:
        """One request; returns the decoded JSON body or raises the typed ApiError for its Status."""
        began = time.monotonic()
        await self._limiter.acquire()
        sent = time.monotonic()
        data = None if body is None else (body if isinstance(body, bytes) else json_codec.dumps(body))
        status = 0
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                params=params,
                data=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(total=request_timeout),
            ) as response:
                payload = await response.read()
                status = response.status
        except aiohttp.ClientError as exc:
            # Callers treat a lost connection like any other OS-level failure and retry.
            raise ConnectionError(f"{method} {path}: {exc}") from exc
        finally:
            code = str(status) if status else "<error>"
            rest_client.observe(self.config.server, method, path, code, time.monotonic() - sent, sent - began)
        if status >= 400:
            raise error_for(_status_of(payload, status), status)
        if not payload:
            return None
        return json_codec.loads(payload)

    # --------------------------------------------------------------------------------------------------- verbs

    async def read_text(self, path: str, params: Mapping[str, str] | None = None, request_timeout: float = 5.0) -> str:
        """GET a plain-text answer (a pod's log); errors as `request`."""
        return (await self.read_bytes(path, params, request_timeout)).decode("utf-8", "replace")

    async def read_bytes(
        self, path: str, params: Mapping[str, str] | None = None, request_timeout: float = 5.0
    ) -> bytes:
        """GET an answer that is not JSON (a log, an image) as it came; errors as `request`."""
        await self._limiter.acquire()
        try:
            async with self.session.get(
                self.base_url + path,
                params=params,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=request_timeout),
            ) as response:
                payload = await response.read()
                status = response.status
        except aiohttp.ClientError as exc:
            raise ConnectionError(f"GET {path}: {exc}") from exc
        if status >= 400:
            raise error_for(_status_of(payload, status), status)
        return payload

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Object:
        result: Object = await self.request("GET", resource.path(namespace, name))
        return result

    async def get_or_none(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Object | None:
        """The object, or None when the API server answers 404."""
        try:
            return await self.get(resource, name, namespace)
        except NotFound:
            return None

    async def list(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
    ) -> Object:
        params = _params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=str(limit) if limit else "",
            resourceVersion=resource_version,
        )
        if continue_token:
            params["continue"] = continue_token
        result: Object = await self.request("GET", resource.path(namespace), params=params)
        return result

    async def list_all(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        page: int = 500,
    ) -> tuple[builtins.list[Object], str]:
        """Every matching object, following continue tokens; returns the items and the list's resourceVersion."""
        items: builtins.list[Object] = []
        token = ""
        while True:
            chunk = await self.list(
                resource,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page,
                continue_token=token,
            )
            items.extend(chunk.get("items") or [])
            token = str((chunk.get("metadata") or {}).get("continue") or "")
            if not token:
                return items, str((chunk.get("metadata") or {}).get("resourceVersion", ""))

    async def create(
        self, resource: ResourceRef, body: Object, namespace: str | None = None, *, dry_run: bool = False
    ) -> Object:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        result: Object = await self.request(
            "POST",
            resource.path(namespace),
            params={"dryRun": "All"} if dry_run else None,
            body=body,
        )
        return result

    async def update(self, resource: ResourceRef, body: Object, *, subresource: str = "") -> Object:
        meta = body.get("metadata") or {}
        path = resource.path(meta.get("namespace"), str(meta["name"]), subresource)
        result: Object = await self.request("PUT", path, body=body)
        return result

    async def update_status(self, resource: ResourceRef, body: Object) -> Object:
        return await self.update(resource, body, subresource="status")

    async def patch(
        self,
        resource: ResourceRef,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = MERGE_PATCH,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str = "",
    ) -> Object:
        params = _params(fieldManager=field_manager, dryRun="All" if dry_run else "")
        result: Object = await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            params=params,
            body=patch,
            content_type=patch_type,
        )
        return result

    async def delete(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> Object:
        options: Object = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        result: Object = await self.request(
            "DELETE",
            resource.path(namespace, name),
            params={"dryRun": "All"} if dry_run else None,
            body=options,
        )
        return result

    # --------------------------------------------------------------------------------------------------- watch

    async def watch(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[WatchEvent]:
        """Events of one watch stream until the server ends it; an ERROR 410 raises Gone."""
        params = _params(
            watch="true",
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=str(timeout_seconds),
            allowWatchBookmarks="true" if allow_bookmarks else "",
        )
        await self._limiter.acquire()
        try:
            async for event in self._stream(resource.path(namespace), params, timeout_seconds):
                yield event
        except aiohttp.ClientError as exc:
            raise ConnectionError(f"watch {resource.plural}: {exc}") from exc

    async def _stream(self, path: str, params: dict[str, str], timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        async with self.session.get(
            self.base_url + path,
            params=params,
            headers=self._headers(),
            # The server ends the stream at timeoutSeconds; the margin only catches a dead connection.
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30),
        ) as response:
            if response.status >= 400:
                raise error_for(_status_of(await response.read(), response.status), response.status)
            buffer = b""
            async for chunk in response.content.iter_any():
                # All the chunk's complete lines at once: splitting one line off at a time copies the rest of a
                # large chunk (an initial list of thousands of objects) once per line.
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json_codec.loads(line)
                    kind = str(event.get("type"))
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        raise (Gone if int(obj.get("code") or 0) == 410 else ApiError)(obj, int(obj.get("code") or 500))
                    yield WatchEvent(kind, obj)


def _params(**values: str) -> dict[str, str]:
    return {k: v for k, v in values.items() if v}


def _status_of(payload: bytes, http_status: int) -> dict[str, Any]:
    try:
        status = json_codec.loads(payload)
        if isinstance(status, dict) and status.get("kind") == "Status":
            return status
    except ValueError:
        pass
    text = payload.decode("utf-8", "replace").strip()[:500]
    return {"kind": "Status", "status": "Failure", "code": http_status, "message": text or f"HTTP {http_status}"}
