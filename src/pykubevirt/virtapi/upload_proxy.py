"""CDI's upload path in the embedded API server: `upload.cdi.kubevirt.io/v1beta1` UploadTokenRequests (as
cdi-apiserver) and the upload proxy (as cdi-uploadproxy) on the API server's own port.

A token is a JWT naming one claim, valid 5 minutes, issued without checking the claim (as CDI does). It is signed
with HS256 by a key in the server's data dir (CDI signs RS256 with its own key pair; only this process checks it).
The proxy answers CDI's paths with CDI's status codes and messages, waits up to 10 s for the claim's upload server
(`cdi.kubevirt.io/storage.pod.ready`) and streams the body to it on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.apiserver.http_api import error_response, json_response
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS

GROUP = "upload.cdi.kubevirt.io"
VERSION = "v1beta1"
ISSUER = "cdi-apiserver"
TOKEN_LIFETIME_SECONDS = 300
KEY_FILE = "upload-token.key"
PROXY_PATHS = ("/v1beta1/upload", "/v1alpha1/upload")
HEALTHZ = "/healthz"
READY_WAIT_SECONDS = 10.0
READY = "cdi.kubevirt.io/storage.pod.ready"
UPLOAD_TARGET = "cdi.kubevirt.io/storage.upload.target"
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
CONTENT_TYPE = "cdi.kubevirt.io/storage.contentType"
SERVER_URL = "upload.pykubevirt.io/server-url"
# CDI's proxy allows a day for one upload.
PROXY_TIMEOUT_SECONDS = 24 * 3600.0


class TokenError(Exception):
    """A token the proxy refuses; `code` is the HTTP status CDI answers."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class UploadTokens:
    """Issues and checks upload tokens with a key kept in `data_dir`."""

    def __init__(self, data_dir: Path) -> None:
        path = data_dir / KEY_FILE
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(32))
        self.key = path.read_bytes()

    def issue(self, namespace: str, claim: str, now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        header = {"alg": "HS256", "typ": "JWT"}
        payload = {
            "iss": ISSUER,
            "iat": issued,
            "nbf": issued,
            "exp": issued + TOKEN_LIFETIME_SECONDS,
            "operation": "Upload",
            "name": claim,
            "namespace": namespace,
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
        }
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
        signature = hmac.new(self.key, signing.encode(), hashlib.sha256).digest()
        return f"{signing}.{_b64(signature)}"

    def verify(self, authorization: str | None, now: float | None = None) -> dict[str, Any]:
        """The token's payload; TokenError 400 when missing or malformed, 401 when invalid or expired."""
        if not authorization:
            raise TokenError(400, "missing auth header")
        scheme, _, token = authorization.partition(" ")
        if scheme != "Bearer" or token.count(".") != 2:
            raise TokenError(400, "malformed auth header")
        signing, _, signature = token.rpartition(".")
        expected = hmac.new(self.key, signing.encode(), hashlib.sha256).digest()
        try:
            valid = hmac.compare_digest(expected, _unb64(signature))
            payload = json.loads(_unb64(signing.split(".")[1]))
        except ValueError:
            raise TokenError(401, "invalid token") from None
        current = now if now is not None else time.time()
        if not valid or not isinstance(payload, dict) or payload.get("iss") != ISSUER:
            raise TokenError(401, "invalid token")
        if not payload.get("nbf", 0) <= current < payload.get("exp", 0):
            raise TokenError(401, "token expired")
        resource = payload.get("resource") or {}
        if payload.get("operation") != "Upload" or resource.get("resource") != "persistentvolumeclaims":
            raise TokenError(400, "invalid token payload")
        return payload


def resource_list() -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{VERSION}",
        "resources": [
            {
                "name": "uploadtokenrequests",
                "singularName": "uploadtokenrequest",
                "namespaced": True,
                "kind": "UploadTokenRequest",
                "verbs": ["create"],
            }
        ],
    }


class UploadAPI:
    """UploadTokenRequest creation and the upload proxy."""

    def __init__(self, tokens: UploadTokens) -> None:
        # Set once the server serves (virt-api's client needs the server's kubeconfig).
        self.client: KubeClient | None = None
        self.tokens = tokens
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def token_request(self, request: web.Request, user: UserInfo) -> web.StreamResponse:
        """POST /apis/upload.cdi.kubevirt.io/v1beta1/namespaces/<ns>/uploadtokenrequests."""
        parts = [p for p in request.path.split("/") if p]
        if len(parts) != 6 or parts[3] != "namespaces" or parts[5] != "uploadtokenrequests":
            return error_response(errors.resource_not_found())
        if request.method != "POST":
            return error_response(errors.method_not_allowed(request.method))
        try:
            body = await request.json()
        except ValueError:
            return error_response(errors.bad_request("the body is not a JSON UploadTokenRequest"))
        claim = str(((body or {}).get("spec") or {}).get("pvcName") or "")
        if not claim:
            return error_response(errors.bad_request("spec.pvcName is required"))
        namespace = parts[4]
        meta = dict((body or {}).get("metadata") or {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName') or 'token-'}{uuid.uuid4().hex[:5]}"
        meta.update(namespace=namespace, creationTimestamp=now_rfc3339())
        answer = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "UploadTokenRequest",
            "metadata": meta,
            "spec": {"pvcName": claim},
            "status": {"token": self.tokens.issue(namespace, claim)},
        }
        return json_response(answer, status=201)

    async def _claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.client is None:
            raise web.HTTPServiceUnavailable(text="the upload proxy is starting")
        return await self.client.get_or_none(PERSISTENT_VOLUME_CLAIMS, name, namespace)

    async def _upload_server(self, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
        """The claim's upload server, once ready (≤10 s, polled every second); web.HTTPException otherwise."""
        deadline = time.monotonic() + READY_WAIT_SECONDS
        while True:
            pvc = await self._claim(namespace, name)
            if pvc is None:
                raise web.HTTPServiceUnavailable(text=f"rejecting Upload Request for PVC {name} that doesn't exist")
            annotations = pvc["metadata"].get("annotations") or {}
            if UPLOAD_TARGET not in annotations:
                raise web.HTTPServiceUnavailable(text=f"PVC {name} is not an upload target")
            if annotations.get(POD_PHASE) == "Succeeded":
                raise web.HTTPServiceUnavailable(
                    text=f"rejecting Upload Request for PVC {name} that already finished uploading"
                )
            if annotations.get(READY) == "true" and annotations.get(SERVER_URL):
                return str(annotations[SERVER_URL]), pvc
            if time.monotonic() >= deadline:
                raise web.HTTPServiceUnavailable(text=f"upload server for PVC {name} is not ready")
            await asyncio.sleep(1.0)

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """CDI's upload proxy: check the token, find the upload server, stream the body to it."""
        if request.path == "/v1beta1/upload-async" or request.method == "HEAD":
            # No async variant here: virtctl's HEAD discovery falls back to the synchronous path.
            return web.Response(status=404)
        try:
            payload = self.tokens.verify(request.headers.get("Authorization"))
        except TokenError as exc:
            return web.Response(status=exc.code, text=str(exc))
        namespace, name = str(payload.get("namespace")), str(payload.get("name"))
        server, pvc = await self._upload_server(namespace, name)
        try:
            path = upload_path(pvc, name, request.path)
        except ValueError as exc:
            return web.Response(status=503, text=str(exc))
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROXY_TIMEOUT_SECONDS))
        headers = {"Content-Type": request.headers.get("Content-Type", "application/octet-stream")}
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        try:
            async with self._session.post(f"{server}{path}", data=request.content, headers=headers) as answer:
                text = await answer.text()
                return web.Response(status=answer.status, text=text)
        except aiohttp.ClientError as exc:
            return web.Response(status=502, text=f"upload server for PVC {name}: {exc}")


def upload_path(pvc: dict[str, Any], name: str, requested: str) -> str:
    """resolveUploadPath: where on the upload server the body goes, by the claim's content type."""
    content = ((pvc.get("metadata") or {}).get("annotations") or {}).get(CONTENT_TYPE, "")
    if content in ("kubevirt", ""):
        return requested
    if content == "archive":
        return "/v1alpha1/upload-archive" if "alpha" in requested else "/v1beta1/upload-archive"
    raise ValueError(f"rejecting upload request for PVC {name} - upload content-type {content} is invalid")


def add_proxy_routes(app: web.Application, api: UploadAPI) -> None:
    for path in PROXY_PATHS:
        app.router.add_route("*", path, api.proxy)
    app.router.add_route("*", "/v1beta1/upload-async", api.proxy)
