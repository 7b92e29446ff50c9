"""What a request asks to do, as kube-apiserver's RequestInfoFactory reads it from the URL, method and query."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pykubevirt.apiserver.request_context import UserInfo

API_PREFIXES = frozenset({"api", "apis"})
# Subresources of a namespace that stay on the namespaces resource (`/api/v1/namespaces/x/status`).
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
# The deprecated `/api/v1/watch/...` form names its verb in the path.
SPECIAL_VERBS = frozenset({"watch", "proxy"})
METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True, slots=True)
class Attributes:
    """authorizer.Attributes: who, and either a resource request or a non-resource path."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _exact_name(field_selector: str) -> str:
    """The name a `metadata.name=x` (or `==`) term of a field selector pins, if it has one."""
    for term in field_selector.split(","):
        for operator in ("==", "="):
            key, sep, value = term.partition(operator)
            if sep and key.strip() == "metadata.name" and not value.startswith("="):
                name = value.strip()
                return name if name and "/" not in name and name not in (".", "..") else ""
    return ""


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The attributes of `method path?query` for `user`, following k8s.io/apiserver/pkg/endpoints/request."""
    parts = [p for p in path.split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path=path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = METHOD_VERBS.get(method.upper(), "")
    if parts[0] in SPECIAL_VERBS:
        if len(parts) < 2:
            return non_resource
        verb, parts = parts[0], parts[1:]
    namespace = ""
    if parts[0] == "namespaces":
        if len(parts) > 1:
            namespace = parts[1]
            if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
                parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("true", "1") else "list"
        name = _exact_name(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user,
        verb,
        True,
        path=path,
        namespace=namespace,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=subresource,
        name=name,
    )
