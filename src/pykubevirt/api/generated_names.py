"""library-go's naming.GetName, which KubeVirt uses for the names of objects it makes from others' names."""

from __future__ import annotations

from typing import Final

DNS1035_LABEL_MAX: Final = 63


def fnv32a(text: str) -> str:
    """Go's hash/fnv New32a, as eight hex digits."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{value:08x}"


def generated_name(base: str, suffix: str, max_length: int = DNS1035_LABEL_MAX) -> str:
    """`base-suffix`, or when too long a shortened base with a hash so the name stays unique."""
    name = f"{base}-{suffix}"
    if len(name) <= max_length:
        return name
    base_length = max_length - 10 - len(suffix)
    if base_length < 0:
        # The suffix leaves no room for the base: the base's start and the hash of the whole name.
        short = f"{base[: max(0, max_length - 9)]}-{fnv32a(name)}"
        return short[:max_length]
    return f"{base[:base_length]}-{fnv32a(base)}-{suffix}"
