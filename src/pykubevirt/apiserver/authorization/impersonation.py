"""Impersonation headers (`kubectl --as`, `--as-group`), allowed only by the `impersonate` verb.

As k8s.io/apiserver's WithImpersonation: each impersonated attribute is authorized separately (users, or
serviceaccounts in their namespace; groups; uids; userextras), and the request then runs as the impersonated
user, who also gets system:authenticated unless the groups say otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from multidict import CIMultiDictProxy

from pykubevirt.api import errors
from pykubevirt.apiserver.authorization.attributes import Attributes
from pykubevirt.apiserver.authorization.forbidden import forbidden
from pykubevirt.apiserver.authorization.rbac import SERVICE_ACCOUNT_PREFIX, Decision
from pykubevirt.apiserver.request_context import UserInfo

USER_HEADER = "Impersonate-User"
GROUP_HEADER = "Impersonate-Group"
UID_HEADER = "Impersonate-Uid"
EXTRA_PREFIX = "Impersonate-Extra-"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


def _check(authorize: Callable[[Attributes], Decision], attributes: Attributes) -> None:
    decision = authorize(attributes)
    if not decision.allowed:
        raise forbidden(attributes, decision.reason)


def impersonate(
    authorize: Callable[[Attributes], Decision], headers: CIMultiDictProxy[str], user: UserInfo
) -> UserInfo:
    """The user a request acts as: `user`, or whom its headers impersonate once `user` may do so."""
    username = headers.get(USER_HEADER, "")
    groups = headers.getall(GROUP_HEADER, [])
    uid = headers.get(UID_HEADER, "")
    extras = [
        (k[len(EXTRA_PREFIX) :].lower(), v) for k, v in headers.items() if k.lower().startswith(EXTRA_PREFIX.lower())
    ]
    if not username:
        if groups or uid or extras:
            what = GROUP_HEADER if groups else UID_HEADER if uid else "Impersonate-Extra"
            raise errors.bad_request(f"requested [{what}] without impersonating a user")
        return user

    def attributes(resource: str, name: str, *, namespace: str = "", group: str = "", sub: str = "") -> Attributes:
        return Attributes(
            user,
            "impersonate",
            True,
            namespace=namespace,
            api_group=group,
            resource=resource,
            subresource=sub,
            name=name,
            api_version="v1",
        )

    impersonated_groups = list(groups)
    if username.startswith(SERVICE_ACCOUNT_PREFIX) and username.count(":") == 3:
        namespace, name = username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
        _check(authorize, attributes("serviceaccounts", name, namespace=namespace))
        impersonated_groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", *groups]
    else:
        _check(authorize, attributes("users", username))
    for group in groups:
        _check(authorize, attributes("groups", group))
    if uid:
        _check(authorize, attributes("uids", uid, group="authentication.k8s.io"))
    for key, value in extras:
        _check(authorize, attributes("userextras", value, group="authentication.k8s.io", sub=key))
    if username == ANONYMOUS:
        if UNAUTHENTICATED not in impersonated_groups:
            impersonated_groups.append(UNAUTHENTICATED)
    elif AUTHENTICATED not in impersonated_groups and UNAUTHENTICATED not in impersonated_groups:
        impersonated_groups.append(AUTHENTICATED)
    return UserInfo(username, tuple(impersonated_groups))
