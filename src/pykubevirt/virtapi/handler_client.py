"""virt-api's connection to the virt-handler of a VMI's node: PUT commands, GET queries and websocket streams.

The handler publishes `host:port` (or an `http(s)://` URL) in the Node annotation `pykubevirt.io/virt-handler-address`
and serves `api.constants.HANDLER_VMI_PATH/{action}`, as KubeVirt's handler port 8186 does.
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import quote

import aiohttp

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.api.handler_address import handler_url
from pykubevirt.api.json_lookup import get
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import NODES
from pykubevirt.client.streams import STREAM_PROTOCOL
from pykubevirt.pki.file_watch import FileWatch

# Upstream's handler HTTP client gives up after 10 s.
REQUEST_TIMEOUT = 10.0


def unavailable(message: str) -> errors.APIError:
    return errors.APIError(503, "ServiceUnavailable", message)


def _status_error(payload: bytes, code: int) -> errors.APIError:
    """The handler's Status, passed through with its code; anything else becomes an internal error."""
    try:
        status = json.loads(payload)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status":
        return errors.APIError.from_status({**status, "code": int(status.get("code") or code)})
    text = payload.decode("utf-8", "replace").strip()[:300]
    return errors.internal(f"virt-handler answered {code}: {text or 'no details'}")


class HandlerClient:
    """Finds a VMI's virt-handler through its Node and talks to it; `close()` ends the shared HTTP session."""

    def __init__(
        self, client: KubeClient, ssl_context: ssl.SSLContext | FileWatch[ssl.SSLContext] | None = None
    ) -> None:
        self.client = client
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _ssl(self, url: str) -> ssl.SSLContext | bool:
        if not url.startswith("https://"):
            return False
        if isinstance(self.ssl_context, FileWatch):
            # The handlers' client certificate, from a Secret volume that may be filled after virt-api started.
            context = self.ssl_context.current()
            if context is None:
                raise unavailable("virt-api has no client certificate for virt-handler yet")
            return context
        return self.ssl_context if self.ssl_context is not None else True

    async def base_url(self, vmi: dict[str, Any]) -> str:
        """The handler URL of the VMI's node, from the Node annotation; 503 when there is none."""
        node_name = str((vmi.get("status") or {}).get("nodeName") or "")
        if not node_name:
            raise unavailable("the VirtualMachineInstance is not assigned to a node yet")
        try:
            node = await self.client.get(NODES, node_name)
        except NotFound:
            raise unavailable(f'node "{node_name}" of the VirtualMachineInstance does not exist') from None
        except (ApiError, OSError) as exc:
            raise errors.internal(f'unable to retrieve node "{node_name}": {exc}') from exc
        address = get(node, "metadata", "annotations", c.HANDLER_ADDRESS_ANNOTATION)
        if not address:
            raise unavailable(
                f'virt-handler on node "{node_name}" is not available: '
                f"the node has no {c.HANDLER_ADDRESS_ANNOTATION} annotation"
            )
        return handler_url(str(address))

    async def url(self, vmi: dict[str, Any], action: str) -> str:
        meta = vmi.get("metadata") or {}
        namespace, name = quote(str(meta.get("namespace") or ""), safe=""), quote(str(meta.get("name") or ""), safe="")
        path = c.HANDLER_VMI_PATH.format(namespace=namespace, name=name)
        return f"{await self.base_url(vmi)}{path}/{action}"

    async def put(self, vmi: dict[str, Any], action: str, body: bytes = b"") -> None:
        """PUT a command (pause, unpause, softreboot); the handler's error Status is raised as it is."""
        url = await self.url(vmi, action)
        try:
            async with self.session.put(
                url, data=body or None, ssl=self._ssl(url), timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
            ) as response:
                payload = await response.read()
                if response.status // 100 != 2:
                    raise _status_error(payload, response.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.internal(f"{action} on virt-handler failed: {exc or type(exc).__name__}") from exc

    async def get_bytes(self, vmi: dict[str, Any], action: str, query: dict[str, str] | None = None) -> bytes:
        """GET an answer as it came (vnc/screenshot's PNG); the handler's error Status is raised as it is."""
        url = await self.url(vmi, action)
        try:
            async with self.session.get(
                url, params=query, ssl=self._ssl(url), timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
            ) as response:
                payload = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.internal(f"{action} on virt-handler failed: {exc or type(exc).__name__}") from exc
        if response.status // 100 != 2:
            raise _status_error(payload, response.status)
        return payload

    async def get_json(self, vmi: dict[str, Any], action: str) -> Any:
        """GET a query (guestosinfo) and return its JSON body."""
        payload = await self.get_bytes(vmi, action)
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise errors.internal(f"virt-handler answered {action} with invalid JSON") from exc

    async def dial(self, vmi: dict[str, Any], action: str, query: dict[str, str]) -> aiohttp.ClientWebSocketResponse:
        """Open the handler's websocket for `action` (console, vnc)."""
        url = await self.url(vmi, action)
        try:
            return await self.session.ws_connect(
                url,
                params=query or None,
                protocols=(STREAM_PROTOCOL,),
                ssl=self._ssl(url),
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=REQUEST_TIMEOUT),
                autoping=True,
                max_msg_size=0,
            )
        except aiohttp.WSServerHandshakeError as exc:
            # aiohttp drops the refusal's body; upstream reports a failed handshake the same way.
            raise errors.internal(f"Can't connect to websocket ({exc.status}): websocket: bad handshake") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.internal(f"Can't connect to websocket: {exc or type(exc).__name__}") from exc
