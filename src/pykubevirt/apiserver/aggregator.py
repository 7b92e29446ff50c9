"""The aggregation layer: API groups served by another server through APIService objects (kube-aggregator).

Each APIService with a `spec.service` makes its group/version a proxied one: requests, authenticated and authorized
here, go to a ready endpoint of the Service over TLS verified against `spec.caBundle`, presenting the front-proxy
client certificate and naming the user in X-Remote-User, X-Remote-Group and X-Remote-Extra- headers. WebSocket
upgrades (virt-api's console and VNC) are proxied frame by frame. Discovery comes from the backend, checked like
kube-aggregator's availability controller, which sets the APIService's Available condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from pykubevirt.api import errors
from pykubevirt.api.timestamps import format_time
from pykubevirt.apiserver.front_proxy import GROUP_HEADER, USER_HEADER, FrontProxy
from pykubevirt.apiserver.http_api import error_response
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.registration_kinds import API_SERVICES
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext, UserInfo
from pykubevirt.apiserver.service_resolution import Backend, ResolutionError, ca_bundle_context, resolve_service
from pykubevirt.apiserver.store_records import Event
from pykubevirt.client.response_relay import relay

log = logging.getLogger("pykubevirt.apiserver.aggregator")

Handler = Callable[[web.Request, UserInfo], Awaitable[web.StreamResponse]]
# (group, version) → (handler, APIResourceList), the server's table of groups it does not serve from its registry.
Groups = dict[tuple[str, str], tuple[Handler, dict[str, Any]]]

# Hop-by-hop headers, the caller's credentials and any identity headers a client sent itself never reach a backend.
_DROPPED_REQUEST = frozenset(
    {"authorization", "host", "connection", "keep-alive", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "content-length"}
)
_DROPPED_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"})
_IDENTITY_PREFIXES = ("x-remote-", "impersonate-")
DISCOVERY_TIMEOUT_SECONDS = 5.0
RECHECK_AVAILABLE_SECONDS = 30.0
RECHECK_UNAVAILABLE_SECONDS = 2.0


def _empty_list(group: str, version: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}", "resources": []}


class Aggregator:
    """Keeps `groups` in step with the stored APIServices and proxies their requests."""

    def __init__(self, api: ObjectAPI, groups: Groups, front_proxy: FrontProxy) -> None:
        self.api = api
        self.groups = groups
        self.front_proxy = front_proxy
        self._owned: dict[tuple[str, str], str] = {}  # (group, version) → APIService name
        self._contexts: dict[tuple[str, bool], ssl.SSLContext] = {}
        self._changed = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Once, here: run() is restarted by the server's supervisor when it crashes.
        api.store.add_listener(self.on_store_event)

    # ------------------------------------------------------------------------------------------- registration

    def on_store_event(self, event: Event) -> None:
        if event.collection == API_SERVICES.collection and self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    def _apiservices(self) -> dict[str, dict[str, Any]]:
        return {r.key: r.value for r in self.api.store.records(API_SERVICES.collection)}

    def _sync(self) -> dict[str, dict[str, Any]]:
        """Register every APIService with a Service as a proxied group/version; drop the ones gone."""
        services = {name: obj for name, obj in self._apiservices().items() if (obj.get("spec") or {}).get("service")}
        wanted = {}
        for name, obj in services.items():
            spec = obj["spec"]
            wanted[(str(spec.get("group", "")), str(spec.get("version", "")))] = name
        for key in [k for k in self._owned if k not in wanted]:
            self.groups.pop(key, None)
            del self._owned[key]
        for key, name in wanted.items():
            if self._owned.get(key) != name or key not in self.groups:
                self.groups[key] = (self._handler(name), _empty_list(*key))
                self._owned[key] = name
        return services

    def _handler(self, name: str) -> Handler:
        async def handle(request: web.Request, user: UserInfo) -> web.StreamResponse:
            obj = self._apiservices().get(name)
            if obj is None:
                return error_response(errors.resource_not_found())
            return await self.proxy(request, user, obj["spec"])

        return handle

    async def run(self) -> None:
        """Follow the APIServices: register them, check their backends' discovery, set their Available condition."""
        self._loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            services = self._sync()
            available = await asyncio.gather(*(self._check(name, obj) for name, obj in services.items()))
            wait = RECHECK_AVAILABLE_SECONDS if all(available) else RECHECK_UNAVAILABLE_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------------------------------- availability

    async def _check(self, name: str, obj: dict[str, Any]) -> bool:
        spec = obj["spec"]
        key = (str(spec.get("group", "")), str(spec.get("version", "")))
        path = f"/apis/{key[0]}/{key[1]}"
        try:
            backend, context = self._backend(spec)
            async with self._session_now().get(
                f"https://{backend.authority}{path}",
                headers=self._identity(UserInfo("system:kube-aggregator", ("system:masters",))),
                ssl=context,
                server_hostname=backend.server_name,
                timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_SECONDS),
            ) as reply:
                if reply.status != 200:
                    raise ResolutionError(f"failing or missing response from {path}: bad status {reply.status}")
                listing = await reply.json(content_type=None)
        except ResolutionError as exc:
            self._set_available(name, False, "FailedDiscoveryCheck", str(exc))
            return False
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            self._set_available(name, False, "FailedDiscoveryCheck", f"failing or missing response from {path}: {exc}")
            return False
        if key in self.groups and self._owned.get(key) == name and isinstance(listing, dict):
            self.groups[key] = (self.groups[key][0], listing)
        self._set_available(name, True, "Passed", "all checks passed")
        return True

    def _set_available(self, name: str, available: bool, reason: str, message: str) -> None:
        current = self._apiservices().get(name)
        if current is None:
            return
        status = "True" if available else "False"
        conditions = (current.get("status") or {}).get("conditions") or []
        old = next((c for c in conditions if c.get("type") == "Available"), None)
        if old is not None and old.get("status") == status and old.get("message") == message:
            return
        changed = old is None or old.get("status") != status
        condition = {
            "type": "Available",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(datetime.now(UTC))
            if changed
            else old.get("lastTransitionTime")
            if old
            else "",
        }
        body = json.dumps({"status": {"conditions": [condition]}}).encode()
        with contextlib.suppress(errors.APIError):
            self.api.patch(
                API_SERVICES,
                None,
                name,
                body,
                "application/merge-patch+json",
                RequestContext(user=SYSTEM_USER),
                subresource="status",
            )

    # ------------------------------------------------------------------------------------------- proxying

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Bytes pass through as the backend encoded them.
            self._session = aiohttp.ClientSession(auto_decompress=False)
        return self._session

    def _backend(self, spec: dict[str, Any]) -> tuple[Backend, ssl.SSLContext]:
        service = spec.get("service") or {}
        backend = resolve_service(
            self.api.store,
            str(service.get("namespace", "")),
            str(service.get("name", "")),
            int(service.get("port") or 443),
        )
        insecure = bool(spec.get("insecureSkipTLSVerify"))
        cache_key = (str(spec.get("caBundle") or ""), insecure)
        context = self._contexts.get(cache_key)
        if context is None:
            context = self.front_proxy.client_context(ca_bundle_context(cache_key[0], insecure=insecure))
            self._contexts[cache_key] = context
        return backend, context

    @staticmethod
    def _identity(user: UserInfo) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        # The server's users carry no extra attributes, so no X-Remote-Extra- header is sent.
        headers[USER_HEADER] = user.username
        for group in user.groups:
            headers.add(GROUP_HEADER, group)
        return headers

    def _forwarded(self, request: web.Request, user: UserInfo) -> CIMultiDict[str]:
        headers = self._identity(user)
        for name, value in request.headers.items():
            lower = name.lower()
            if lower in _DROPPED_REQUEST or lower.startswith(_IDENTITY_PREFIXES):
                continue
            if lower.startswith("sec-websocket-"):
                continue
            headers.add(name, value)
        return headers

    async def proxy(self, request: web.Request, user: UserInfo, spec: dict[str, Any]) -> web.StreamResponse:
        try:
            backend, context = self._backend(spec)
        except ResolutionError as exc:
            return error_response(errors.APIError(503, "ServiceUnavailable", f"service unavailable: {exc}"))
        url = f"https://{backend.authority}{request.raw_path}"
        headers = self._forwarded(request, user)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._proxy_websocket(request, url, headers, context, backend)
        body = await request.read()
        try:
            async with self._session_now().request(
                request.method,
                url,
                headers=headers,
                data=body or None,
                ssl=context,
                server_hostname=backend.server_name,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=DISCOVERY_TIMEOUT_SECONDS),
            ) as reply:
                return await relay(request, reply, _DROPPED_RESPONSE)
        except (aiohttp.ClientError, OSError) as exc:
            return error_response(errors.APIError(503, "ServiceUnavailable", f"error trying to reach service: {exc}"))

    async def _proxy_websocket(
        self,
        request: web.Request,
        url: str,
        headers: CIMultiDict[str],
        context: ssl.SSLContext,
        backend: Backend,
    ) -> web.StreamResponse:
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        try:
            upstream = await self._session_now().ws_connect(
                url, headers=headers, protocols=offered, ssl=context, server_hostname=backend.server_name
            )
        except aiohttp.WSServerHandshakeError as exc:
            return web.Response(status=exc.status, text=exc.message)
        except (aiohttp.ClientError, OSError) as exc:
            return error_response(errors.APIError(503, "ServiceUnavailable", f"error trying to reach service: {exc}"))
        client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else ())
        await client.prepare(request)

        async def pump(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                elif message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
                else:
                    break
            await sink.close()

        tasks = [asyncio.create_task(pump(client, upstream)), asyncio.create_task(pump(upstream, client))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await upstream.close()
            await client.close()
        return client
