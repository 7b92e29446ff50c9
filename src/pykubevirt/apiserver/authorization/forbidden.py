"""403 Forbidden as kube-apiserver words it (endpoints/handlers/responsewriters.forbiddenMessage + NewForbidden)."""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver.authorization.attributes import Attributes


def forbidden_message(attributes: Attributes) -> str:
    """`User "u" cannot list resource "pods" in API group "" in the namespace "default"` and its variants."""
    user = attributes.user.username
    if not attributes.resource_request:
        return f'User "{user}" cannot {attributes.verb} path "{attributes.path}"'
    what = f'{attributes.verb} resource "{attributes.combined_resource}" in API group "{attributes.api_group}"'
    if attributes.namespace:
        return f'User "{user}" cannot {what} in the namespace "{attributes.namespace}"'
    return f'User "{user}" cannot {what} at the cluster scope'


def forbidden(attributes: Attributes, reason: str = "") -> errors.APIError:
    """The Status kube-apiserver answers when no authorizer allowed the request."""
    detail = forbidden_message(attributes)
    if reason:
        detail = f"{detail}: {reason}"
    resource = attributes.resource if attributes.resource_request else ""
    group = attributes.api_group if attributes.resource_request else ""
    qualified = errors.qualified(resource, group) if resource else ""
    name = attributes.name
    if not qualified:
        message = f"forbidden: {detail}"
    elif not name:
        message = f"{qualified} is forbidden: {detail}"
    else:
        message = f'{qualified} "{name}" is forbidden: {detail}'
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    return errors.APIError(403, "Forbidden", message, details=details or None)
