"""The authorization step of every request: impersonation first, then RBAC on what the request asks to do."""

from __future__ import annotations

import logging

from aiohttp import web

from pykubevirt.apiserver.authorization.attributes import request_attributes
from pykubevirt.apiserver.authorization.forbidden import forbidden
from pykubevirt.apiserver.authorization.impersonation import impersonate
from pykubevirt.apiserver.authorization.rbac import Authorizer
from pykubevirt.apiserver.object_api import UserInfo

log = logging.getLogger("pykubevirt.apiserver.authorization")


class RequestAuthorizer:
    """Decides each request for its authenticated user; raises the APIError to answer when it is refused."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def admit(self, request: web.Request, user: UserInfo) -> UserInfo:
        """The user the request runs as (impersonated or not), once the request is authorized for that user."""
        acting = impersonate(self.authorizer.authorize, request.headers, user)
        attributes = request_attributes(acting, request.method, request.path, request.query)
        decision = self.authorizer.authorize(attributes)
        if not decision.allowed:
            error = forbidden(attributes, decision.reason)
            # Denials of the components' own identities are bugs in their roles: say so in the server's log.
            log.info("forbidden: %s", error.message)
            raise error
        return acting
