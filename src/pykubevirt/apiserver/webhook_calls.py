"""One AdmissionReview v1 call to a webhook over TLS, with kube-apiserver's URL, timeout and error texts."""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from pykubevirt.api import json_codec
from pykubevirt.apiserver.service_resolution import Backend, ResolutionError, ca_bundle_context, resolve_service
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.webhook_matching import Attributes

DEFAULT_TIMEOUT_SECONDS = 10
REVIEW_API_VERSION = "admission.k8s.io/v1"


class CallError(Exception):
    """The webhook could not be called or answered nonsense; the text follows "failed calling webhook"."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    server_name: str | None
    context: ssl.SSLContext


def target_of(store: Store, client_config: dict[str, Any], timeout: int) -> Target:
    """Where to POST the review: `url`, or the Service resolved to a ready endpoint; `?timeout=` as kube adds it."""
    try:
        context = ca_bundle_context(client_config.get("caBundle"))
        if client_config.get("url"):
            url = str(client_config["url"])
            server_name = None
        else:
            service = client_config.get("service") or {}
            backend: Backend = resolve_service(
                store, str(service.get("namespace", "")), str(service.get("name", "")), int(service.get("port") or 443)
            )
            url = f"https://{backend.authority}{service.get('path') or '/'}"
            server_name = backend.server_name
    except ResolutionError as exc:
        raise CallError(f"failed to call webhook: {exc}") from exc
    separator = "&" if "?" in url else "?"
    return Target(f"{url}{separator}timeout={timeout}s", server_name, context)


def review_request(
    attrs: Attributes, user: tuple[str, tuple[str, ...]], kind: tuple[str, str, str], dry_run: bool
) -> dict[str, Any]:
    """The AdmissionReview v1 kube-apiserver sends for this request; `kind` is the object's group, version, kind."""
    group_version_kind = {"group": kind[0], "version": kind[1], "kind": kind[2]}
    resource = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": group_version_kind,
        "resource": resource,
        "requestKind": group_version_kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": {"username": user[0], "groups": list(user[1])},
        "object": attrs.obj,
        "oldObject": attrs.old,
        "dryRun": dry_run,
        "options": {"kind": options_kind.get(attrs.operation, "CreateOptions"), "apiVersion": "meta.k8s.io/v1"},
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "request": request}


def _go_error(url: str, exc: BaseException) -> str:
    """The error net/http would print for a failed POST (what kubectl users search for)."""
    where = f'Post "{url}"'
    if isinstance(exc, TimeoutError):
        return f"{where}: context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"{where}: tls: failed to verify certificate: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        parts = urlsplit(url)
        reason = "connection refused" if isinstance(exc.os_error, ConnectionRefusedError) else str(exc.os_error)
        return f"{where}: dial tcp {parts.hostname}:{parts.port}: connect: {reason}"
    return f"{where}: {exc}"


async def call(session: aiohttp.ClientSession, target: Target, review: dict[str, Any], seconds: int) -> dict[str, Any]:
    """The `response` of the webhook's AdmissionReview; CallError when it cannot be had."""
    try:
        async with session.post(
            target.url,
            data=json_codec.dumps(review),
            headers={"Content-Type": "application/json"},
            ssl=target.context,
            server_hostname=target.server_name,
            timeout=aiohttp.ClientTimeout(total=seconds),
        ) as reply:
            if reply.status != 200:
                text = (await reply.text())[:512]
                raise CallError(f"failed to call webhook: the server responded with status {reply.status}: {text}")
            body = await reply.json(content_type=None)
    except CallError:
        raise
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise CallError(f"failed to call webhook: {_go_error(target.url, exc)}") from exc
    except ValueError as exc:
        raise CallError(f"received invalid webhook response: {exc}") from exc
    if (
        not isinstance(body, dict)
        or body.get("apiVersion") != REVIEW_API_VERSION
        or body.get("kind") != "AdmissionReview"
    ):
        got = f"{body.get('apiVersion')}, Kind={body.get('kind')}" if isinstance(body, dict) else type(body).__name__
        raise CallError(
            f"received invalid webhook response: expected {REVIEW_API_VERSION}, Kind=AdmissionReview, got {got}"
        )
    response = body.get("response")
    if not isinstance(response, dict):
        raise CallError("received invalid webhook response: response is missing")
    expected_uid = review["request"]["uid"]
    if response.get("uid") != expected_uid:
        raise CallError(
            f'received invalid webhook response: expected response.uid="{expected_uid}", '
            f'got "{response.get("uid", "")}"'
        )
    return response
