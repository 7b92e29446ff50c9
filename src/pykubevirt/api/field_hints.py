"""Hints for unknown fields that are a known misplacement of a real KubeVirt field."""

from __future__ import annotations

import re

# (pattern of the unknown path, where the field belongs, why).
_MISPLACED: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^(?P<iface>.*\.interfaces\[\d+\])\.masquerade\.ports$"),
        "in KubeVirt's API `ports` belongs to the interface, not to `masquerade`: use {iface}.ports",
    ),
    (
        re.compile(r"^(?P<iface>.*\.interfaces\[\d+\])\.(?:bridge|masquerade)\.(?P<field>macAddress|model|bootOrder)$"),
        "`{field}` belongs to the interface: use {iface}.{field}",
    ),
)


def hint_for(path: str) -> str:
    """A sentence saying where a misplaced field belongs, or "" when none is known."""
    for pattern, template in _MISPLACED:
        match = pattern.match(path)
        if match:
            return template.format(**match.groupdict())
    return ""


def unknown_field_messages(paths: list[str]) -> list[str]:
    """`unknown field "<path>"` per path, as Kubernetes' strict decoder words it, with a hint when one is known."""
    messages = []
    for path in paths:
        hint = hint_for(path)
        messages.append(f'unknown field "{path}"' + (f" ({hint})" if hint else ""))
    return messages


def strict_decoding_error(kind: str, version: str, paths: list[str]) -> str:
    """kube-apiserver's 400 message for unknown fields under fieldValidation=Strict."""
    return f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: ' + ", ".join(
        unknown_field_messages(paths)
    )
