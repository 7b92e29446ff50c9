"""Tokens for pods' projected `serviceAccountToken` sources, as the kubelet's token manager gets them.

A TokenRequest (`serviceaccounts/<name>/token`) bound to the pod, with the source's audience and expiration (at
least 10 minutes, 1 hour by default); the token is kept and asked for again once 80 % of its life has passed, so the
volume's 60 s rewrite costs no request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pykubevirt.api.timestamps import parse_time
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError

DEFAULT_EXPIRATION_SECONDS = 3600
REFRESH_FRACTION = 0.8

# (pod uid, service account, audience, expiration seconds)
_Key = tuple[str, str, str, int]


class TokenError(Exception):
    """The token could not be had; the message is the API server's."""


class ServiceAccountTokens:
    """One node's tokens, by pod and source."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock
        self._tokens: dict[_Key, tuple[str, float]] = {}

    async def token(self, pod: Mapping[str, Any], source: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        audience = str(source.get("audience") or "")
        seconds = int(source.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS)
        key = (str(meta.get("uid") or ""), account, audience, seconds)
        kept = self._tokens.get(key)
        now = self.clock()
        if kept is not None and now < kept[1]:
            return kept[0]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")},
            },
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        try:
            answer = await self.client.request("POST", path, body=body) or {}
        except ApiError as exc:
            raise TokenError(exc.message) from exc
        status = answer.get("status") or {}
        token = str(status.get("token") or "")
        expires = parse_time(status.get("expirationTimestamp"))
        lifetime = expires.timestamp() - now if expires is not None else float(seconds)
        self._tokens[key] = (token, now + REFRESH_FRACTION * max(lifetime, 0.0))
        return token

    def forget(self, pod_uid: str) -> None:
        """A pod gone: its tokens are not asked for again."""
        for key in [k for k in self._tokens if k[0] == pod_uid]:
            del self._tokens[key]
