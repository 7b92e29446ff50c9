"""Validation causes and the 422 `Status` KubeVirt renders from them (pkg/util/webhooks: ToAdmissionResponse)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FIELD_VALUE_INVALID = "FieldValueInvalid"
FIELD_VALUE_REQUIRED = "FieldValueRequired"
FIELD_VALUE_NOT_SUPPORTED = "FieldValueNotSupported"
FIELD_VALUE_DUPLICATE = "FieldValueDuplicate"
FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"

# KubeVirt puts at most this many causes in one rejection and counts the rest.
MAX_CAUSES = 10


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason a request is rejected: a `metav1.StatusCause`."""

    type: str
    message: str
    field: str

    def to_dict(self) -> dict[str, str]:
        # metav1.StatusCause serialises its type under the JSON name "reason".
        return {"reason": self.type, "message": self.message, "field": self.field}


def invalid(field: str, message: str) -> Cause:
    return Cause(FIELD_VALUE_INVALID, message, field)


def required(field: str, message: str) -> Cause:
    return Cause(FIELD_VALUE_REQUIRED, message, field)


def not_supported(field: str, message: str) -> Cause:
    return Cause(FIELD_VALUE_NOT_SUPPORTED, message, field)


def duplicate(field: str, message: str) -> Cause:
    return Cause(FIELD_VALUE_DUPLICATE, message, field)


def forbidden(field: str, message: str) -> Cause:
    return Cause(FIELD_VALUE_FORBIDDEN, message, field)


class FieldPath:
    """A dotted field path (`spec.template.spec.domain.devices.disks[0]`) built the way KubeVirt's k8sfield does."""

    __slots__ = ("_path",)

    def __init__(self, path: str = "") -> None:
        self._path = path

    def child(self, *names: str) -> FieldPath:
        path = self._path
        for name in names:
            path = f"{path}.{name}" if path else name
        return FieldPath(path)

    def index(self, i: int) -> FieldPath:
        return FieldPath(f"{self._path}[{i}]")

    def key(self, k: str) -> FieldPath:
        return FieldPath(f"{self._path}[{k}]")

    def __str__(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"FieldPath({self._path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPath) and other._path == self._path

    def __hash__(self) -> int:
        return hash(self._path)


def rejection_message(causes: Sequence[Cause]) -> str:
    """The first ten cause messages joined by ", ", then ", and N more validation errors"."""
    shown = causes[:MAX_CAUSES]
    message = ", ".join(c.message for c in shown)
    if len(causes) > MAX_CAUSES:
        message = f"{message}, and {len(causes) - MAX_CAUSES} more validation errors"
    return message


def rejection_status(causes: Sequence[Cause], *, message_prefix: str = "") -> dict[str, Any]:
    """A `Status` with code 422 and reason `Invalid`, as KubeVirt's webhooks answer."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message_prefix + rejection_message(causes),
        "reason": "Invalid",
        "details": {"causes": [c.to_dict() for c in causes[:MAX_CAUSES]]},
        "code": 422,
    }


class AdmissionRejected(Exception):
    """Raised by the admission chain when validation finds causes."""

    def __init__(self, causes: Iterable[Cause], webhook: str = "") -> None:
        self.causes = list(causes)
        self.webhook = webhook
        super().__init__(rejection_message(self.causes))

    def denied_prefix(self) -> str:
        """What kube-apiserver puts before a webhook's message: 'admission webhook "<name>" denied the request: '."""
        return f'admission webhook "{self.webhook}" denied the request: ' if self.webhook else ""

    def status(self) -> dict[str, Any]:
        return rejection_status(self.causes, message_prefix=self.denied_prefix())


class RequestDenied(AdmissionRejected):
    """A webhook's plain refusal: `Status{code, message}` without causes (KubeVirt answers 400)."""

    def __init__(self, message: str, webhook: str = "", code: int = 400) -> None:
        super().__init__([], webhook)
        self.message = message
        self.code = code
        self.args = (message,)

    def __str__(self) -> str:
        return self.message

    def status(self) -> dict[str, Any]:
        # kube-apiserver keeps the webhook's code and message and adds the "denied the request" prefix.
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.denied_prefix() + self.message,
            "code": self.code,
        }
