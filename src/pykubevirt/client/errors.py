"""Typed API errors, one class per `Status.reason` a component reacts to."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A non-success answer from the API server, carrying its `Status`."""

    def __init__(self, status: dict[str, Any], http_status: int) -> None:
        self.status = status
        self.code = int(status.get("code") or http_status)
        self.reason = str(status.get("reason") or "")
        self.message = str(status.get("message") or f"HTTP {http_status}")
        super().__init__(self.message)

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list((self.status.get("details") or {}).get("causes") or [])


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class MethodNotAllowed(ApiError):
    pass


class AlreadyExists(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """410: the resourceVersion is older than the server's history (watch or list must restart)."""


class RequestEntityTooLarge(ApiError):
    pass


class UnsupportedMediaType(ApiError):
    pass


class Invalid(ApiError):
    pass


class TooManyRequests(ApiError):
    pass


class ServerError(ApiError):
    pass


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "RequestEntityTooLarge": RequestEntityTooLarge,
    "UnsupportedMediaType": UnsupportedMediaType,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
}


def error_for(status: dict[str, Any], http_status: int) -> ApiError:
    """The most specific error class for a `Status` (reason first, then HTTP code)."""
    reason = str(status.get("reason") or "")
    code = int(status.get("code") or http_status)
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code) or (ServerError if code >= 500 else ApiError)
    return cls(status, http_status)
