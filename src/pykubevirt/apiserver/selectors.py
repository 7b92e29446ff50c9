"""Field selectors, parsed and matched as kube-apiserver does (apimachinery's fields package)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.label_selectors import SelectorError

# Field labels whose value is not at the same path in the object (core/v1 Event's selectable fields).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "source": ("source", "component"),
    "reportingComponent": ("reportingController",),
}


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """`field=value` or `field!=value`."""

    field: str
    operator: str
    value: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_field_value(self.value)}"


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The string a field selector compares against; a missing value is ""."""
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if isinstance(current, str):
        return current
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, int | float):
        return str(current)
    return ""


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A conjunction of field equality terms."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for requirement in self.requirements:
            equal = field_value(obj, requirement.path) == requirement.value
            if equal != (requirement.operator == "="):
                return False
        return True

    def fields(self) -> set[str]:
        return {r.field for r in self.requirements}

    def exact(self, field: str) -> str | None:
        """The value `field` must equal, when the selector pins it (lets the server look one object up)."""
        for requirement in self.requirements:
            if requirement.field == field and requirement.operator == "=":
                return requirement.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def escape_field_value(value: str) -> str:
    """fields.EscapeValue: backslash-escape `\\`, `,` and `=`."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_field_value(value: str) -> str:
    """fields.UnescapeValue, with kube-apiserver's error messages."""
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    in_slash = False
    for ch in value:
        if in_slash:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch in ",=":
            # Go prints the offending rune with %v, i.e. as its code point.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    start, in_slash = 0, False
    for i, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def parse_field_selector(text: str) -> FieldSelector:
    """Parse a fieldSelector query parameter (`=`, `==`, `!=`, comma-separated, values escaped with backslashes)."""
    if not text:
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for term in sorted(_split_terms(text)):
        if not term:
            continue
        for i in range(len(term)):
            # No escaping on the left-hand side: the first operator found splits the term; "!=" and "==" win over "=".
            op = next((o for o in ("!=", "==", "=") if term.startswith(o, i)), None)
            if op is not None:
                field, raw = term[:i], term[i + len(op) :]
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        value = unescape_field_value(raw)
        path = FIELD_ALIASES.get(field) or tuple(field.split("."))
        requirements.append(FieldRequirement(field, "!=" if op == "!=" else "=", value, path))
    return FieldSelector(tuple(requirements))


def check_fields(selector: FieldSelector, allowed: Iterable[str]) -> None:
    """Raise kube-apiserver's error for the first field the resource cannot be selected on."""
    allowed = set(allowed)
    for requirement in selector.requirements:
        if requirement.field not in allowed:
            raise SelectorError(f"field label not supported: {requirement.field}")
