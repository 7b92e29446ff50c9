"""Why a request is invalid: `metav1.StatusCause` and the field paths it names (apimachinery's field.Path)."""

from __future__ import annotations

from dataclasses import dataclass

FIELD_VALUE_INVALID = "FieldValueInvalid"
FIELD_VALUE_REQUIRED = "FieldValueRequired"
FIELD_VALUE_NOT_SUPPORTED = "FieldValueNotSupported"
FIELD_VALUE_DUPLICATE = "FieldValueDuplicate"
FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"


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
