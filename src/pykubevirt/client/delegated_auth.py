"""Authentication and authorization delegated to the API server, as kube's components guard their /metrics.

A request's bearer token is checked with a TokenReview and the user it names with a SubjectAccessReview for the
non-resource path (`get /metrics`): the same token that reaches the API reaches the metrics, and RBAC decides who
may read them (kube's `system:auth-delegator` rights for the component, `nonResourceURLs` rules for the reader).
Answers are cached for a minute, as client-go's delegating authenticator caches them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHE_SECONDS = 60.0


@dataclass(frozen=True)
class Decision:
    """200 (allowed), 401 (no valid token) or 403 (a user RBAC does not allow), and why."""

    code: int
    reason: str = ""


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class DelegatedAuth:
    """Decides whether a request may `get` a non-resource path of this component, or do `verb` on a resource (the
    kubelet's API is authorized as a subresource of its Node: `create nodes/proxy` to exec)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._cache: dict[tuple[str, str], tuple[float, Decision]] = {}

    async def decide(self, authorization: str | None, path: str) -> Decision:
        attributes = {"nonResourceAttributes": {"path": path, "verb": "get"}}
        return await self._decide(authorization, path, attributes, f'cannot get path "{path}"')

    async def decide_resource(
        self, authorization: str | None, verb: str, resource: str, subresource: str, name: str
    ) -> Decision:
        attributes = {
            "resourceAttributes": {"verb": verb, "resource": resource, "subresource": subresource, "name": name}
        }
        what = f'cannot {verb} resource "{resource}/{subresource}" "{name}"'
        return await self._decide(authorization, f"{verb} {resource}/{subresource} {name}", attributes, what)

    async def _decide(
        self, authorization: str | None, key: str, attributes: Mapping[str, object], what: str
    ) -> Decision:
        token = bearer_token(authorization)
        if not token:
            return Decision(401, "no bearer token")
        now = time.monotonic()
        cached = self._cache.get((token, key))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            decision = await self._review(token, attributes, what)
        except (ApiError, ConnectionError) as exc:
            # Not cached: the API server may answer the next scrape.
            return Decision(401, f"the token could not be reviewed: {exc}")
        if len(self._cache) > 1024:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[(token, key)] = (now + CACHE_SECONDS, decision)
        return decision

    async def _review(self, token: str, attributes: Mapping[str, object], what: str) -> Decision:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = (await self.client.request("POST", TOKEN_REVIEWS, body=review) or {}).get("status") or {}
        if not status.get("authenticated"):
            return Decision(401, "the token is not valid")
        user = status.get("user") or {}
        access = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.get("username", ""),
                "groups": list(user.get("groups") or []),
                "uid": user.get("uid", ""),
                **attributes,
            },
        }
        answer = (await self.client.request("POST", SUBJECT_ACCESS_REVIEWS, body=access) or {}).get("status") or {}
        if not answer.get("allowed"):
            return Decision(403, f'user "{user.get("username", "")}" {what}')
        return Decision(200)


def status_body(decision: Decision) -> dict[str, object]:
    """The Status kube's components answer a refused request with."""
    if decision.code == 401:
        message, reason = "Unauthorized", "Unauthorized"
    else:
        message, reason = f"forbidden: {decision.reason}", "Forbidden"
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": decision.code,
    }
