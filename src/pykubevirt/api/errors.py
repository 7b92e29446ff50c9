"""API errors as Kubernetes `Status` objects, with kube-apiserver's codes, reasons and message texts."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error answered to the client as a `Status` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> APIError:
        details = status.get("details")
        if isinstance(details, dict) and details.get("causes"):
            details = dict(details, causes=[wire_cause(c) for c in details["causes"]])
        return cls(
            int(status.get("code", 500)),
            str(status.get("reason", "")),
            str(status.get("message", "")),
            details=details,
        )


def wire_cause(cause: dict[str, Any]) -> dict[str, Any]:
    """A metav1.StatusCause as JSON: its Go field `Type` is serialised as `reason` (clients read only that)."""
    if "type" not in cause:
        return cause
    wire = {k: v for k, v in cause.items() if k != "type"}
    wire.setdefault("reason", cause["type"])
    return {"reason": wire.pop("reason"), **wire}


def qualified(plural: str, group: str) -> str:
    """`virtualmachines.kubevirt.io` or `pods`, as kube-apiserver names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, group: str, plural: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(plural: str, group: str, name: str) -> APIError:
    return APIError(
        404, "NotFound", f'{qualified(plural, group)} "{name}" not found', details=_details(name, group, plural)
    )


def resource_not_found() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource", details={})


def already_exists(plural: str, group: str, name: str) -> APIError:
    return APIError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        details=_details(name, group, plural),
    )


def conflict(plural: str, group: str, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        details=_details(name, group, plural),
    )


MODIFIED_CONFLICT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> APIError:
    """422 Invalid with field causes; the message lists `field: detail` like apimachinery's aggregate."""
    rendered = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    body = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    return APIError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {body}',
        details={"name": name, "group": group, "kind": kind, "causes": causes},
    )


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
        details={"causes": [{"reason": "UnsupportedMediaType", "message": content_type}]},
    )


def method_not_allowed(method: str) -> APIError:
    return APIError(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource: {method}"
    )


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def too_large_resource_version(requested: int, current: int) -> APIError:
    """What kube-apiserver answers a read at a revision it has not reached (clients retry it)."""
    return APIError(
        504,
        "Timeout",
        # NewTimeoutError's prefix: client-go matches the cause, people read the message.
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str, *, plural: str = "", group: str = "", name: str = "") -> APIError:
    details = _details(name, group, plural) if plural else None
    return APIError(403, "Forbidden", message, details=details)


def too_large(limit: int) -> APIError:
    return APIError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def internal(message: str) -> APIError:
    return APIError(500, "InternalError", f"Internal error occurred: {message}")


def not_acceptable(message: str) -> APIError:
    return APIError(406, "NotAcceptable", message)


def invalid_field(
    kind: str, group: str, name: str, field: str, detail: str, reason: str = "FieldValueInvalid"
) -> APIError:
    """422 Invalid with a single field cause."""
    return invalid(kind, group, name, [{"reason": reason, "message": detail, "field": field}])
