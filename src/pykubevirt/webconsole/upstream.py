"""Forwarding to the API server: plain requests and watch streams are streamed back chunk by chunk, websockets
(virt-api's console and VNC) are relayed message by message; every request carries the session's bearer token."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from pykubevirt.client.config import ClientConfig
from pykubevirt.client.response_relay import relay
from pykubevirt.client.streams import pump_websockets
from pykubevirt.pki.file_watch import FileWatch

# Hop-by-hop headers, and the browser's own credentials: the proxy sends the session's token instead.
_DROPPED_REQUEST = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "transfer-encoding",
        "proxy-authorization",
        "authorization",
        "cookie",
        "content-length",
        "origin",
        "referer",
        "x-console",
        "accept-encoding",
    }
)
_DROPPED_RESPONSE = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "set-cookie"}
)


def upload_proxy_ssl(insecure: bool) -> ssl.SSLContext | bool:
    """CDI's proxy has its own CA: the system's trust, or no checks at all with --uploadproxy-insecure (as virtctl's
    --insecure)."""
    if not insecure:
        return True
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def upstream_ssl(config: ClientConfig) -> ssl.SSLContext | bool:
    """Trust the cluster's CA, and present no client certificate: the user's token is the only credential."""
    if not config.server.startswith("https"):
        return False
    context = ssl.create_default_context(cadata=config.ca_data.decode() if config.ca_data else None)
    if config.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class Upstream:
    """The API server the console talks to, and one connection pool to it."""

    server: str
    context: ssl.SSLContext | bool
    session: aiohttp.ClientSession | None = None
    # CDI's upload proxy; "" is the API server's own (the embedded cluster serves CDI's upload paths on its port).
    upload_proxy: str = ""
    upload_context: ssl.SSLContext | bool = True
    # The handlers' CA (the ConfigMap kubevirt-ca, read again as it changes): a handler serving https on a cluster is
    # verified against it before the user's token goes there.
    handler_ca: FileWatch[ssl.SSLContext] | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            # Replies are decompressed here and sent on as plain bytes, so Content-Encoding is never passed on.
            self.session = aiohttp.ClientSession(auto_decompress=True, timeout=aiohttp.ClientTimeout(total=None))
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    def _headers(self, request: web.Request, token: str) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in request.headers.items():
            lower = name.lower()
            if lower in _DROPPED_REQUEST or lower.startswith("sec-websocket-"):
                continue
            headers.add(name, value)
        headers["Authorization"] = f"Bearer {token}"
        return headers

    async def request(
        self, method: str, path: str, token: str, *, json_body: object = None
    ) -> tuple[int, dict[str, object]]:
        """One JSON request on the user's behalf (the login's SelfSubjectReview)."""
        async with self._session().request(
            method,
            self.server + path,
            json=json_body,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            ssl=self.context,
            timeout=aiohttp.ClientTimeout(total=15),
        ) as reply:
            try:
                body = await reply.json(content_type=None)
            except ValueError:
                body = {}
            return reply.status, body if isinstance(body, dict) else {}

    async def scrape(self, url: str, token: str) -> tuple[int, str]:
        """A component's /metrics (virt-handler's), with the user's token: the component reviews it with the API."""
        context: ssl.SSLContext | bool = True
        if url.startswith("https://") and self.handler_ca is not None:
            context = self.handler_ca.current() or True
        async with self._session().get(
            url, headers={"Authorization": f"Bearer {token}"}, timeout=aiohttp.ClientTimeout(total=10), ssl=context
        ) as reply:
            return reply.status, await reply.text()

    async def forward(self, request: web.Request, token: str) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request, token)
        body = await request.read()
        try:
            async with self._session().request(
                request.method,
                self.server + request.raw_path,
                headers=self._headers(request, token),
                data=body or None,
                ssl=self.context,
            ) as reply:
                return await relay(request, reply, _DROPPED_RESPONSE)
        except (aiohttp.ClientError, OSError) as exc:
            return unavailable(exc)

    async def upload(self, request: web.Request, upload_token: str) -> web.Response:
        """A disk image to CDI's upload proxy (as `virtctl image-upload`: the API server's unless one is named),
        streamed as it arrives: the proxy checks the upload token, which names one claim, not the user's token."""
        headers = {
            "Authorization": f"Bearer {upload_token}",
            "Content-Type": request.headers.get("Content-Type", "application/octet-stream"),
        }
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        try:
            proxy, context = (
                (self.upload_proxy, self.upload_context) if self.upload_proxy else (self.server, self.context)
            )
            async with self._session().post(
                proxy + request.path, data=request.content, headers=headers, ssl=context
            ) as reply:
                return web.Response(status=reply.status, text=await reply.text())
        except (aiohttp.ClientError, OSError) as exc:
            return web.json_response(_status(503, f"the upload proxy {proxy} cannot be reached: {exc}"), status=503)

    async def _websocket(self, request: web.Request, token: str) -> web.StreamResponse:
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        url = self.server.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + request.raw_path
        try:
            upstream = await self._session().ws_connect(
                url, headers=self._headers(request, token), protocols=offered, ssl=self.context, max_msg_size=0
            )
        except aiohttp.WSServerHandshakeError as exc:
            return web.json_response(_status(exc.status, exc.message), status=exc.status)
        except (aiohttp.ClientError, OSError) as exc:
            return unavailable(exc)
        client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else (), max_msg_size=0)
        await client.prepare(request)
        try:
            await pump_websockets(client, upstream)
        finally:
            await upstream.close()
            await client.close()
        return client


def _status(code: int, message: str) -> dict[str, object]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def unavailable(exc: BaseException) -> web.Response:
    return web.json_response(_status(503, f"the API server cannot be reached: {exc}"), status=503)


def handler_ca_watch(ca_file: str) -> FileWatch[ssl.SSLContext]:
    """Verification of the handlers' server certificate: their CA, which names no host (KubeVirt's certificates
    name none), with OpenSSL's purpose check leaving only the CA's serverAuth certificate."""

    def load() -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=ca_file)
        context.check_hostname = False
        return context

    return FileWatch((Path(ca_file),), load)
