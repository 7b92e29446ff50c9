"""`serviceaccounts/<name>/token`: TokenRequest, as kube-apiserver serves it to the kubelet and `kubectl create token`.

The token is the service account's bearer token in the server's token table (created at the first request), not a
signed, expiring JWT: `status.expirationTimestamp` says what was asked for, and the token outlives it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.api.timestamps import format_time
from pykubevirt.apiserver import patching, protobuf
from pykubevirt.apiserver.http_api import RestHandlers, Target, json_response
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.security import TokenTable, service_account_groups, service_account_user

DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
DEFAULT_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


class TokenRequests:
    """Answers TokenRequests for existing service accounts."""

    def __init__(self, api: ObjectAPI, tokens: TokenTable, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.tokens = tokens
        self.clock = clock

    def install(self, rest: RestHandlers) -> None:
        rest.subresource_handlers[("serviceaccounts", "token")] = self.handle

    async def handle(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        if request.method != "POST":
            raise errors.method_not_allowed(request.method)
        namespace, name = str(target.namespace), str(target.name)
        self.api.get(target.resource, namespace, name)  # 404 for a service account that does not exist
        raw = await request.read()
        try:
            if patching.media_type(request.headers.get("Content-Type")) == protobuf.CONTENT_TYPE:
                body: Any = protobuf.decode(raw)  # kubectl's typed client sends protobuf
            else:
                body = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise errors.bad_request(f"the body is not a TokenRequest: {exc}") from exc
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        seconds = int(spec.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS)
        if seconds < MIN_EXPIRATION_SECONDS:
            raise errors.invalid_field(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                "spec.expirationSeconds",
                f"Invalid value: {seconds}: may not specify a duration less than 10 minutes",
            )
        token = self.tokens.ensure(service_account_user(namespace, name), service_account_groups(namespace))
        now = self.clock()
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": format_time(now)},
            "spec": {
                "audiences": list(spec.get("audiences") or [DEFAULT_AUDIENCE]),
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef"),
            },
            "status": {"token": token, "expirationTimestamp": format_time(now + timedelta(seconds=seconds))},
        }
        return json_response(answer, 201)
