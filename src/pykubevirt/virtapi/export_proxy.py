"""KubeVirt's virt-exportproxy on the embedded API server's port: the external links of VirtualMachineExports.

`/api/export.kubevirt.io/<version>/namespaces/<ns>/virtualmachineexports/<name>/<path>` goes to the export's
server, as virt-exportproxy's does through the export's Service: 400 for another path, 404 for an export that does
not exist, 503 while it is not Ready. The server checks the export token itself, so the proxy asks the caller for
no credentials of the API server. Exporter pods have no Service network here: the server's loopback address is the
annotation virt-controller writes on the pod from its log.
"""

from __future__ import annotations

import logging
import re
from typing import Final

import aiohttp
from aiohttp import web

from pykubevirt.api.constants import EXPORT_GROUP
from pykubevirt.api.export_names import SERVER_URL_ANNOTATION, exporter_pod_name
from pykubevirt.api.kubevirt.export import EXPORT_PLURAL
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import PODS, VM_EXPORTS

log = logging.getLogger("pykubevirt.virtapi.export")

PREFIX: Final = f"/api/{EXPORT_GROUP}/"
_PATH = re.compile(rf"^/api/{re.escape(EXPORT_GROUP)}/(v1|v1beta1)/namespaces/([^/]+)/{EXPORT_PLURAL}/([^/]+)/(.*)$")
# What a download's answer carries over from the server; hop-by-hop headers stay behind.
_PASSED_BACK: Final = ("Content-Type", "Content-Length", "Content-Encoding", "Content-Disposition", "Last-Modified")
_PASSED_ON: Final = ("Accept", "Accept-Encoding", "Range", "x-kubevirt-export-token")
# Images are GiBs: no total limit, only on connecting and on the server's silence.
_TIMEOUT: Final = aiohttp.ClientTimeout(total=None, connect=10, sock_read=300)
CHUNK: Final = 1 << 20


class ExportProxy:
    """Forwards export links to their exporter pod's server, as virt-api's identity reads the export and pod."""

    def __init__(self) -> None:
        self.client: KubeClient | None = None
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        match = _PATH.match(request.path)
        if match is None or request.method not in ("GET", "HEAD"):
            return web.Response(status=400)
        if self.client is None:
            return web.Response(status=503, text="the export proxy is starting")
        _, namespace, name, rest = match.groups()
        try:
            export = await self.client.get_or_none(VM_EXPORTS, name, namespace)
            if export is None:
                return web.Response(status=404)
            if (export.get("status") or {}).get("phase") != "Ready":
                return web.Response(status=503)
            pod = await self.client.get_or_none(PODS, exporter_pod_name(name), namespace)
        except ApiError as exc:
            return web.Response(status=500, text=str(exc))
        server = str(((pod or {}).get("metadata", {}).get("annotations") or {}).get(SERVER_URL_ANNOTATION) or "")
        if not server:
            return web.Response(status=503)
        return await self._forward(request, f"{server}/{rest}")

    async def _forward(self, request: web.Request, url: str) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=_TIMEOUT, auto_decompress=False)
        headers = {h: request.headers[h] for h in _PASSED_ON if h in request.headers}
        response: web.StreamResponse | None = None
        try:
            async with self._session.request(
                request.method, url, params=request.query, headers=headers, allow_redirects=False
            ) as answer:
                response = web.StreamResponse(status=answer.status)
                for header in _PASSED_BACK:
                    if header in answer.headers:
                        response.headers[header] = answer.headers[header]
                await response.prepare(request)
                if request.method == "GET":
                    async for chunk in answer.content.iter_chunked(CHUNK):
                        await response.write(chunk)
                await response.write_eof()
                return response
        except aiohttp.ClientError as exc:
            if response is not None and response.prepared:
                # The status went out already: closing the connection tells the client its body was cut short.
                log.warning("export server %s stopped mid-answer: %s", url, exc)
                if request.transport is not None:
                    request.transport.close()
                return response
            return web.Response(status=502, text=f"export server: {exc}")


def add_export_routes(app: web.Application, proxy: ExportProxy) -> None:
    app.router.add_route("*", PREFIX + "{tail:.*}", proxy.handle)
