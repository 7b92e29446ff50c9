"""List and watch query parameters parsed as kube-apiserver parses them, with its error texts."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping

from pykubevirt.api import errors
from pykubevirt.apiserver.store import Store

MAX_UINT64 = 2**64 - 1
MAX_INT64 = 2**63 - 1
# kube-apiserver's watch cache waits this long for a resourceVersion it has not reached, then answers 504.
FRESHNESS_WAIT_SECONDS = 3.0
_FRESHNESS_POLL_SECONDS = 0.05
_DIGITS = re.compile(r"[0-9]+")
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+")


def _go_quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def resource_version(value: str) -> int:
    """A resourceVersion parameter as storage's APIObjectVersioner parses it ("" and "0" are 0); 400 otherwise."""
    if value in ("", "0"):
        return 0
    problem = ""
    if not _DIGITS.fullmatch(value):
        problem = "invalid syntax"
    elif int(value) > MAX_UINT64:
        problem = "value out of range"
    if problem:
        quoted = _go_quote(value)
        raise errors.bad_request(
            f"invalid resource version: resourceVersion: Invalid value: {quoted}: "
            f"strconv.ParseUint: parsing {quoted}: {problem}"
        )
    return int(value)


def integer_parameter(value: str) -> int:
    """An int64 query parameter (timeoutSeconds, limit) as apimachinery's query decoding parses it; 400 otherwise."""
    problem = ""
    if not _SIGNED_DIGITS.fullmatch(value):
        problem = "invalid syntax"
    elif not -MAX_INT64 - 1 <= int(value) <= MAX_INT64:
        problem = "value out of range"
    if problem:
        raise errors.bad_request(f"strconv.ParseInt: parsing {_go_quote(value)}: {problem}")
    return int(value)


def boolean_parameter(query: Mapping[str, str], name: str) -> bool:
    """A bool query parameter as apimachinery converts it: absent, "0" or "false" (any case) is false, anything else
    (an empty value too) is true."""
    value = query.get(name)
    return value is not None and value != "0" and value.lower() != "false"


def optional_integer(query: Mapping[str, str], name: str) -> int | None:
    """An int64 query parameter, None when absent; present but empty or malformed is kube's 400."""
    value = query.get(name)
    return None if value is None else integer_parameter(value)


def check_list_options(query: Mapping[str, str]) -> None:
    """What kube's ListOptions decoding refuses before any list or watch starts: a malformed integer."""
    for name in ("limit", "timeoutSeconds"):
        optional_integer(query, name)


async def reached(store: Store, revision: int, within: float = FRESHNESS_WAIT_SECONDS) -> bool:
    """Whether the store reaches `revision` within `within` seconds (a client may have seen a newer server's)."""
    deadline = time.monotonic() + within
    while store.revision < revision:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_FRESHNESS_POLL_SECONDS)
    return True
