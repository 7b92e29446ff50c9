"""virtctl's view of KubeVirt: the subresource calls and websocket streams of kubevirt.io/client-go."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import quote

import aiohttp

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, BadRequest, error_for
from pykubevirt.client.streams import STREAM_PROTOCOL

SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"


class VirtctlError(Exception):
    """A failure reported to the user as one line on stderr (exit status 1)."""


def error_message(exc: BaseException) -> str:
    """What a failed call says in virtctl's one-line errors: the server's Status message, else the OS error."""
    return exc.message if isinstance(exc, ApiError) else str(exc)


def subresource_path(namespace: str, resource: str, name: str, subresource: str) -> str:
    ns, n = quote(namespace, safe=""), quote(name, safe="")
    return f"{SUBRESOURCES}/namespaces/{ns}/{resource}/{n}/{subresource}"


def _headers(client: KubeClient) -> dict[str, str]:
    token = client.config.bearer_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _status(payload: bytes, code: int) -> dict[str, Any]:
    try:
        status = json.loads(payload)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status":
        return status
    text = payload.decode("utf-8", "replace").strip()
    return {"kind": "Status", "code": code, "message": text or f"Websocket failed with http status: {code}"}


async def put_subresource(
    client: KubeClient, namespace: str, resource: str, name: str, subresource: str, body: dict[str, Any] | None
) -> None:
    """PUT one subresource; raises the server's ApiError."""
    await client.request("PUT", subresource_path(namespace, resource, name, subresource), body=body)


async def server_version(client: KubeClient) -> dict[str, Any]:
    result: dict[str, Any] = await client.request("GET", f"{SUBRESOURCES}/version")
    return result


async def _refusal(client: KubeClient, path: str, params: dict[str, str], status: int) -> ApiError:
    """Why the server refused a websocket: aiohttp drops the body of a failed handshake, so ask again without it.

    virt-api answers the same Status to a plain GET, as it checks the VMI before upgrading the connection.
    """
    try:
        async with client.session.get(
            client.base_url + path,
            params=params,
            headers=_headers(client),
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            payload = await response.read()
            code = response.status
    except aiohttp.ClientError:
        payload, code = b"", status
    if code < 400:
        payload, code = b"", status
    return error_for(_status(payload, code), code)


async def open_stream(
    client: KubeClient,
    namespace: str,
    name: str,
    subresource: str,
    params: dict[str, str] | None = None,
    *,
    resource: str = "virtualmachineinstances",
) -> aiohttp.ClientWebSocketResponse:
    """A VMI (or VM) stream's websocket (console, vnc, portforward/…); raises the server's ApiError if refused."""
    path = subresource_path(namespace, resource, name, subresource)
    params = params or {}
    try:
        return await client.session.ws_connect(
            client.base_url + path,
            params=params or None,
            protocols=(STREAM_PROTOCOL,),
            headers=_headers(client),
            max_msg_size=0,
        )
    except aiohttp.WSServerHandshakeError as exc:
        raise await _refusal(client, path, params, exc.status) from exc
    except aiohttp.ClientError as exc:
        raise VirtctlError(f"Can't connect to websocket: {exc}") from exc


async def open_stream_waiting(
    client: KubeClient, namespace: str, name: str, subresource: str, wait_seconds: float
) -> aiohttp.ClientWebSocketResponse:
    """client-go's SerialConsole with a timeout: retry while the server answers 400 (VMI not running yet)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return await open_stream(client, namespace, name, subresource)
        except BadRequest:
            if time.monotonic() >= deadline:
                raise VirtctlError("Timeout trying to connect to the virtual machine instance") from None
            await asyncio.sleep(1)
