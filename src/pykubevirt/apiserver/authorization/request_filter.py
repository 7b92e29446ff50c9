"""The authorization step of every request: impersonation first, then RBAC on what the request asks to do."""

from __future__ import annotations

import dataclasses
import logging

from aiohttp import web

from pykubevirt.apiserver.authorization.attributes import request_attributes
from pykubevirt.apiserver.authorization.forbidden import forbidden
from pykubevirt.apiserver.authorization.impersonation import impersonate
from pykubevirt.apiserver.authorization.rbac import Authorizer
from pykubevirt.apiserver.request_context import UserInfo

log = logging.getLogger("pykubevirt.apiserver.authorization")


# Requests allowed under the current policy, remembered by everything the decision reads; bounded for many paths.
MAX_REMEMBERED_ALLOWS = 8192

# Who asks, the method and path, the two query parameters request_attributes reads (watch, fieldSelector), and whether
# it asks to upgrade to a WebSocket.
_AllowKey = tuple[str, tuple[str, ...], str, str, str | None, str | None, bool]
# The pods' subresources a WebSocket GET streams into: kube 1.30+ (AuthorizePodWebsocketUpgradeCreatePermission) also
# asks that the user may `create` them, as the SPDY POST always did.
STREAMING_POD_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})


class RequestAuthorizer:
    """Decides each request for its authenticated user; raises the APIError to answer when it is refused."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self._generation = -1
        self._allowed: set[_AllowKey] = set()

    def admit(self, request: web.Request, user: UserInfo) -> UserInfo:
        """The user the request runs as (impersonated or not), once the request is authorized for that user."""
        acting = impersonate(self.authorizer.authorize, request.headers, user)
        query = request.query
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        key = (
            acting.username,
            acting.groups,
            request.method,
            request.path,
            query.get("watch"),
            query.get("fieldSelector"),
            upgrade,
        )
        # Components repeat the same requests (a pod's status, a VMI) many times: the decision is the same until a
        # role or binding changes, which moves the policy's generation.
        generation = self.authorizer.generation()
        if generation != self._generation:
            self._allowed.clear()
            self._generation = generation
        if key in self._allowed:
            return acting
        attributes = request_attributes(acting, request.method, request.path, query)
        checked = [attributes]
        if upgrade and attributes.resource == "pods" and attributes.subresource in STREAMING_POD_SUBRESOURCES:
            checked.append(dataclasses.replace(attributes, verb="create"))
        for wanted in checked:
            decision = self.authorizer.authorize(wanted)
            if not decision.allowed:
                error = forbidden(wanted, decision.reason)
                # Denials of the components' own identities are bugs in their roles: say so in the server's log.
                log.info("forbidden: %s", error.message)
                raise error
        if len(self._allowed) >= MAX_REMEMBERED_ALLOWS:
            self._allowed.clear()
        self._allowed.add(key)
        return acting
