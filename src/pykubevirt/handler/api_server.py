"""virt-handler's own endpoint, which virt-api proxies VMI operations to (KubeVirt's handler port 8186).

PUT …/pause, …/unpause, …/softreboot, …/reset act through the VMI's launcher; GET …/guestosinfo, …/userlist and
…/filesystemlist return what the launcher's guest agent poller knows; GET …/console and …/vnc are websockets
carrying the bytes of the guest's serial console and VNC server, GET …/vnc/screenshot its screen as a PNG.
GET /metrics serves the node's VMI domain metrics (handler/domain_stats_scrape.py) to a bearer token the API server
accepts (client/delegated_auth.py). The heartbeat publishes its address in the Node annotation
`pykubevirt.io/virt-handler-address`. It listens on loopback, or (on a cluster, the pod's IP) over TLS, where the
VMI paths take only the handlers' client certificate, which virt-api holds too, as KubeVirt's console server does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.client.delegated_auth import DelegatedAuth, status_body
from pykubevirt.client.informer import Informer
from pykubevirt.client.streams import STREAM_PROTOCOL, pump_websocket_stream
from pykubevirt.handler.certificates import CLIENT_COMMON_NAME, PeerRejected, check_peer
from pykubevirt.handler.domain_stats_scrape import DomainStatsScraper
from pykubevirt.handler.launcher_client import (
    CommandFailed,
    LauncherClient,
    LauncherUnavailable,
    ProtocolMismatch,
    connectable,
)
from pykubevirt.handler.vmi_reconciler import active_pod_uid
from pykubevirt.launcher.protocol import Command
from pykubevirt.log import object_fields
from pykubevirt.metrics.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("pykubevirt.handler.api")

# virt-handler's guest agent queries (its REST paths) → the launcher command answering each.
GUEST_AGENT_QUERIES = {
    "guestosinfo": Command.GUEST_INFO,
    "userlist": Command.USER_LIST,
    "filesystemlist": Command.FILESYSTEM_LIST,
}
# The reply envelope of the launcher protocol, not part of the body virt-api returns.
_ENVELOPE = ("id", "ok", "protocolVersion")


def status(code: int, message: str, reason: str = "") -> web.Response:
    reasons = {
        400: "BadRequest",
        401: "Unauthorized",
        404: "NotFound",
        409: "Conflict",
        500: "InternalError",
        503: "ServiceUnavailable",
    }
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or reasons.get(code, ""),
        "code": code,
    }
    return web.json_response(body, status=code)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The paths open over TLS without a client certificate: the probes' and the metrics' (a bearer token instead).
_OPEN_PATHS = ("/healthz", "/metrics")


@web.middleware
async def _require_client_certificate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Over TLS, the VMI paths serve only a peer with the handlers' client certificate (verified against the CA)."""
    if request.path in _OPEN_PATHS:
        return await handler(request)
    peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
    if not peer:
        return status(401, "a client certificate of the virt-handler CA is required")
    try:
        check_peer(peer, CLIENT_COMMON_NAME)
    except PeerRejected as exc:
        return status(401, f"client certificate rejected: {exc}")
    return await handler(request)


class HandlerAPI:
    """The aiohttp application and its lifecycle."""

    def __init__(
        self,
        *,
        node: str,
        pods_dir: Path,
        vmis: Informer,
        host: str = "127.0.0.1",
        metrics_auth: DelegatedAuth | None = None,
    ) -> None:
        self.node = node
        self.pods_dir = pods_dir
        self.vmis = vmis
        self.host = host
        self.port = 0
        self.scheme = "http"
        self.metrics = DomainStatsScraper(node=node, pods_dir=pods_dir, vmis=vmis)
        # The bearer token of the API, reviewed by the API server (kube's delegated auth); None leaves it open.
        self.metrics_auth = metrics_auth
        self._runner: web.AppRunner | None = None
        # The USB redirection channels streaming now, by VMI uid.
        self._usbredir_slots: dict[str, set[int]] = {}

    def app(self, *, client_certificates: bool = False) -> web.Application:
        app = web.Application(middlewares=[_require_client_certificate] if client_certificates else [])
        for action in (Command.PAUSE, Command.UNPAUSE, Command.SOFT_REBOOT, Command.RESET):
            app.router.add_put(f"{c.HANDLER_VMI_PATH}/{action}", self._command(action))
        for query, command in GUEST_AGENT_QUERIES.items():
            app.router.add_get(f"{c.HANDLER_VMI_PATH}/{query}", self._query(command))
        app.router.add_put(f"{c.HANDLER_VMI_PATH}/{Command.FREEZE}", self._freeze)
        app.router.add_put(f"{c.HANDLER_VMI_PATH}/{Command.UNFREEZE}", self._command(Command.UNFREEZE))
        app.router.add_get(f"{c.HANDLER_VMI_PATH}/console", self._console)
        app.router.add_get(f"{c.HANDLER_VMI_PATH}/vnc", self._vnc)
        app.router.add_get(f"{c.HANDLER_VMI_PATH}/vnc/screenshot", self._screenshot)
        app.router.add_get(f"{c.HANDLER_VMI_PATH}/usbredir", self._usbredir)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.metrics_auth is not None:
            decision = await self.metrics_auth.decide(request.headers.get("Authorization"), request.path)
            if decision.code != 200:
                return web.json_response(status_body(decision), status=decision.code)
        body = await self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    async def _healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def start(self, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> None:
        """Listen; with `ssl_context` over TLS, the VMI paths asking for the handlers' client certificate."""
        self._runner = web.AppRunner(self.app(client_certificates=ssl_context is not None), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port, ssl_context=ssl_context)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.scheme = "https" if ssl_context is not None else "http"

    def annotations(self) -> dict[str, str]:
        """Where virt-api reaches this handler; the heartbeat writes it onto the Node with every beat."""
        if not self.port:
            return {}
        host = f"[{self.host}]" if ":" in self.host else self.host
        address = f"https://{host}:{self.port}" if self.scheme == "https" else f"{host}:{self.port}"
        return {c.HANDLER_ADDRESS_ANNOTATION: address}

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------------------------------------ helpers

    def _vmi(self, request: web.Request) -> tuple[dict[str, Any] | None, str]:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        vmi = self.vmis.get_by_name(namespace, name)
        if vmi is None:
            return None, f'virtualmachineinstances.kubevirt.io "{name}" not found on node {self.node}'
        return vmi, ""

    async def _launcher_call(
        self,
        request: web.Request,
        command: Command,
        *,
        move_cursor: bool | None = None,
        unfreeze_timeout: int | None = None,
        failure_code: int = 500,
    ) -> tuple[dict[str, Any], dict[str, Any] | None, web.Response | None]:
        """One command to the VMI's launcher: (vmi, reply, None), or the error Status to answer instead."""
        vmi, problem = self._vmi(request)
        if vmi is None:
            return {}, None, status(404, problem)
        launcher = LauncherClient.of_pod(self.pods_dir, active_pod_uid(vmi, self.node, self.pods_dir))
        try:
            reply = await launcher.request(command, move_cursor=move_cursor, unfreeze_timeout=unfreeze_timeout)
        except LauncherUnavailable as exc:
            return vmi, None, status(503, f"virt-launcher is not available: {exc}")
        except (CommandFailed, ProtocolMismatch) as exc:
            return vmi, None, status(failure_code, f"{command} failed: {exc}")
        return vmi, reply, None

    def _command(self, action: Command) -> Any:
        async def handle(request: web.Request) -> web.Response:
            vmi, _, failure = await self._launcher_call(request, action)
            if failure is not None:
                return failure
            log.info("%s done", action, extra=object_fields(vmi))
            return web.Response(status=200)

        return handle

    async def _freeze(self, request: web.Request) -> web.Response:
        """Freeze the guest's filesystems; the body's `unfreezeTimeout` (a duration) says when they thaw anyway."""
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            return status(400, "failed to unmarshal unfreeze timeout")
        timeout = body.get("unfreezeTimeout") if isinstance(body, dict) else None
        if timeout is None:
            return status(400, "Unfreeze timeout in freeze request is not set")
        try:
            seconds = int(parse_go_duration(str(timeout)))
        except ValueError:
            return status(400, "failed to unmarshal unfreeze timeout")
        # A failed freeze is the caller's to retry (KubeVirt answers 400 and records FreezeError).
        vmi, _, failure = await self._launcher_call(request, Command.FREEZE, unfreeze_timeout=seconds, failure_code=400)
        if failure is not None:
            return failure
        log.info("guest filesystems frozen", extra=object_fields(vmi, unfreeze_timeout=seconds))
        return web.Response(status=202)

    async def _screenshot(self, request: web.Request) -> web.Response:
        """The VMI's screen as a PNG; `moveCursor=true` wakes a screen saver first."""
        move = request.query.get("moveCursor", "").lower() == "true"
        _, reply, failure = await self._launcher_call(request, Command.SCREENSHOT, move_cursor=move)
        if reply is None:
            assert failure is not None
            return failure
        try:
            image = base64.b64decode(str(reply.get("png", "")), validate=True)
        except binascii.Error as exc:
            return status(500, f"{Command.SCREENSHOT} failed: {exc}")
        return web.Response(body=image, content_type="image/png")

    def _query(self, command: Command) -> Any:
        async def handle(request: web.Request) -> web.Response:
            _, reply, failure = await self._launcher_call(request, command)
            if reply is None:
                assert failure is not None
                return failure
            return web.json_response({k: v for k, v in reply.items() if k not in _ENVELOPE})

        return handle

    async def _console(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, pod_layout.serial_socket, "serial console")

    async def _vnc(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, pod_layout.vnc_socket, "VNC server")

    async def _usbredir(self, request: web.Request) -> web.StreamResponse:
        """One USB device a connection, on the first of the VMI's redirection channels not in use (KubeVirt's)."""
        vmi, problem = self._vmi(request)
        if vmi is None:
            return status(404, problem)
        used = self._usbredir_slots.setdefault(vmi["metadata"]["uid"], set())
        slot = next((s for s in range(pod_layout.USB_REDIRECT_SLOTS) if s not in used), None)
        if slot is None:
            return status(503, "All USB devices are in use.")
        used.add(slot)
        try:
            return await self._stream(
                request,
                lambda pods, pod, uid: pod_layout.usbredir_socket(pods, pod, uid, slot),
                f"USB redirection channel {slot}",
            )
        finally:
            used.discard(slot)

    async def _stream(self, request: web.Request, socket_of: Any, what: str) -> web.StreamResponse:
        vmi, problem = self._vmi(request)
        if vmi is None:
            return status(404, problem)
        phase = (vmi.get("status") or {}).get("phase")
        if phase not in (c.PHASE_RUNNING, c.PHASE_SCHEDULED):
            return status(
                400,
                f"Unable to connect to VirtualMachineInstance because phase is {phase} instead of Running or Scheduled",
            )
        path = socket_of(str(self.pods_dir), active_pod_uid(vmi, self.node, self.pods_dir), vmi["metadata"]["uid"])
        try:
            reader, writer = await asyncio.open_unix_connection(connectable(path))
        except OSError as exc:
            return status(503, f"the {what} of the VMI is not available: {exc.strerror or exc}")
        ws = web.WebSocketResponse(protocols=(STREAM_PROTOCOL,), heartbeat=30)
        await ws.prepare(request)
        log.info("%s connected", what, extra=object_fields(vmi))
        try:
            await pump_websocket_stream(ws, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            await ws.close()
        return ws
