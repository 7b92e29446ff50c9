"""The `key:value,key:value` parameters of virtctl's create flags (pkg/virtctl/create/params), upstream's errors."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Literal

from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.virtctl.client import VirtctlError

ParamKind = Literal["string", "uint", "quantity", "strings"]
# k8s.io/apimachinery's rand.String alphabet: no vowels, no look-alikes.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_UINT32 = 2**32 - 1


def flag_error(flag: str, message: str) -> VirtctlError:
    """params.FlagErr: which flag could not be parsed, and why."""
    return VirtctlError(f'failed to parse "--{flag}" flag: {message}')


def random_suffix(length: int = 5) -> str:
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(length))


def split_params(text: str) -> dict[str, str]:
    """`a:1,b:2` → {"a": "1", "b": "2"}; a value may hold colons, a later key wins."""
    if text == "":
        raise ValueError("params may not be empty")
    found: dict[str, str] = {}
    for param in text.split(","):
        key, sep, value = param.partition(":")
        if not sep:
            raise ValueError(f"params need to have at least one colon: {param}")
        found[key] = value
    return found


def map_params(flag: str, text: str, kinds: Mapping[str, ParamKind]) -> dict[str, str | int | Quantity | list[str]]:
    """params.Map: each known parameter converted to its kind; unknown ones are an error."""
    try:
        given = split_params(text)
    except ValueError as exc:
        raise flag_error(flag, str(exc)) from None
    values: dict[str, str | int | Quantity | list[str]] = {}
    for key, kind in kinds.items():
        if key not in given:
            continue
        raw = given.pop(key)
        if kind == "uint":
            if not raw.isdigit() or int(raw) > _MAX_UINT32:
                reason = "value out of range" if raw.isdigit() else "invalid syntax"
                raise flag_error(flag, f'failed to parse param "{key}": strconv.ParseUint: parsing "{raw}": {reason}')
            values[key] = int(raw)
        elif kind == "quantity":
            try:
                values[key] = Quantity.parse(raw)
            except QuantityError as exc:
                raise flag_error(flag, f'failed to parse param "{key}": {exc}') from None
        elif kind == "strings":
            values[key] = raw.split(";")
        else:
            values[key] = raw
    if given:
        unknown = ",".join(f"{key}:{value}" for key, value in given.items())
        raise flag_error(flag, f"unknown param(s): {unknown}")
    return values


def param_by_name(name: str, text: str) -> str | None:
    """params.GetParamByName, None when the parameter is absent."""
    return split_params(text).get(name)


def split_prefixed_name(text: str) -> tuple[str, str]:
    """`prefix/name` or `name` → (prefix, name)."""
    parts = text.split("/")
    if len(parts) > 2:
        raise ValueError(f"invalid count {len(parts) - 1} of slashes in prefix/name")
    prefix, name = (parts[0], parts[1]) if len(parts) == 2 else ("", parts[0])
    if name == "":
        raise ValueError("name cannot be empty")
    return prefix, name


def supported(kinds: Mapping[str, ParamKind]) -> str:
    """params.Supported: the parameters a flag takes, for its help."""
    go_types = {"string": "string", "uint": "uint", "quantity": "resource.Quantity", "strings": "[]string"}
    return ",".join(f"{key}:{go_types[kind]}" for key, kind in kinds.items())
