"""Request bodies to JSON values, with the limits kube-apiserver's decoders set.

- JSON without `NaN` or `Infinity` (not JSON, and what we stored would come back as invalid JSON).
- YAML whose aliases cannot blow a small body up: the decoded value is measured as the JSON it would be stored as,
  so the request size limit (3 MiB) holds after decoding as well as on the wire.
- At most MAX_DEPTH levels of nested objects and arrays. Go's decoders stop at 10,000; Python's recursion limit sits
  far below that, and every walk of the object (copying, patching, validation, encoding) recurses once per level,
  so the limit is 200 here, deeper than any Kubernetes object or CRD schema we know of.

Each violation is a 400 (413 for size), never a 500 from a RecursionError or a value that cannot be encoded.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from pykubevirt.api import errors, json_codec

MAX_DEPTH = 200
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class DecodeError(ValueError):
    """A body that is not a value we accept; `too_large` for the size limit (413), else 400."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def _reject_constant(name: str) -> Any:
    raise DecodeError(f"invalid character '{name.lstrip('-')[0]}' looking for beginning of value")


def load_json(raw: bytes, max_bytes: int) -> Any:
    """A JSON body as a value within the limits; DecodeError otherwise."""
    try:
        value = json_codec.loads_plain(raw)
    except ValueError:
        pass
    else:
        if surely_within_limits(raw, max_bytes):
            return value
        check_value(value, max_bytes)
        return value
    try:
        # UTF-8 only, its invalid bytes read as U+FFFD as Go's decoder reads them (the json module would guess at
        # UTF-16 or UTF-32 from the first bytes).
        value = json_codec.loads(raw.decode("utf-8", errors="replace"), parse_constant=_reject_constant)
    except RecursionError as exc:
        raise DecodeError("exceeded max depth") from exc
    except DecodeError:
        raise
    except ValueError as exc:
        raise DecodeError(str(exc)) from exc
    check_value(value, max_bytes)
    return without_lone_surrogates(value)


def load_yaml(raw: bytes, max_bytes: int) -> Any:
    """A YAML body as a JSON value within the limits (aliases counted as often as they are expanded)."""
    try:
        value = yaml.safe_load(raw.decode("utf-8"))
    except RecursionError as exc:
        raise DecodeError(f"yaml: exceeded max depth of {MAX_DEPTH}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DecodeError(str(exc)) from exc
    check_value(value, max_bytes, yaml_source=True)
    return without_lone_surrogates(value)


def without_lone_surrogates(value: Any) -> Any:
    """`value` with each lone UTF-16 surrogate ("\\ud800" in JSON) read as U+FFFD, as Go's decoder reads it: such a
    string cannot be encoded as UTF-8, to be stored or sent back. Only the json module's and YAML's values can hold
    one (orjson refuses them), and those are rare enough to walk."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_lone_surrogates(item) for item in value]
    return value


def surely_within_limits(encoded: bytes, max_bytes: int) -> bool:
    """True when plain JSON this long, with this few brackets, cannot break a limit `check_value` sets.

    The walk counts at most five bytes for every byte of JSON (an integer or null is counted as five, and takes one
    and a separator), and no object or array can be nested deeper than the brackets there are; counting them is done
    in C, where the walk is Python, so the usual body is let through without it.
    """
    return len(encoded) * 5 <= max_bytes and encoded.count(b"{") + encoded.count(b"[") <= MAX_DEPTH


# A line this deeply indented (two spaces a level) is the only place a value MAX_DEPTH levels deep can open.
_DEEPEST_LINE = b"\n" + b"  " * MAX_DEPTH


def value_surely_within_limits(value: Any, max_bytes: int) -> bool:
    """True when `value` surely passes `check_value`: its indented JSON (encoded in C) has no line indented
    MAX_DEPTH levels deep, and is short enough that the walk's count could not exceed `max_bytes` (indents only
    lengthen it). The bracket count of `surely_within_limits` passes few objects of real size, where this does."""
    try:
        text = json_codec.dumps_indented(value)
    except TypeError:
        return False
    return len(text) * 5 <= max_bytes and _DEEPEST_LINE not in text


def check_value(value: Any, max_bytes: int, *, yaml_source: bool = False) -> None:
    """DecodeError unless `value` is JSON-encodable, at most MAX_DEPTH deep and about `max_bytes` once encoded."""
    budget = [max_bytes]
    _measure(value, 1, budget, yaml_source)


def _measure(value: Any, depth: int, budget: list[int], yaml_source: bool) -> None:
    if depth > MAX_DEPTH:
        raise DecodeError(f"yaml: exceeded max depth of {MAX_DEPTH}" if yaml_source else "exceeded max depth")
    if isinstance(value, dict):
        budget[0] -= 2 + len(value)
        for key, child in value.items():
            if not isinstance(key, str):
                # YAML allows any key; JSON (and so Kubernetes) only strings.
                raise DecodeError(f"error converting YAML to JSON: unsupported map key of type {type(key).__name__}")
            budget[0] -= len(key) + 3
            if type(child) in (dict, list):
                _measure(child, depth + 1, budget, yaml_source)
            else:
                _scalar(child, budget, yaml_source)
    elif isinstance(value, list):
        budget[0] -= 2 + len(value)
        for child in value:
            if type(child) in (dict, list):
                _measure(child, depth + 1, budget, yaml_source)
            else:
                _scalar(child, budget, yaml_source)
    else:
        _scalar(value, budget, yaml_source)
    if budget[0] < 0:
        raise DecodeError("the decoded object is larger than the request size limit", too_large=True)


def _scalar(value: Any, budget: list[int], yaml_source: bool) -> None:
    if isinstance(value, str):
        budget[0] -= len(value) + 2
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise DecodeError(f"json: unsupported value: {_go_float(value)}")
        budget[0] -= 8
    elif value is None or isinstance(value, bool | int):
        budget[0] -= 5
    elif type(value) is bytes and not yaml_source:
        budget[0] -= len(value)  # JSON kept encoded (a stored field set, in a patched object)
    elif yaml_source:
        # Timestamps, binary and sets from YAML tags have no JSON form.
        raise DecodeError(f"error converting YAML to JSON: unsupported value of type {type(value).__name__}")
    else:
        raise DecodeError(f"unsupported value of type {type(value).__name__}")


def _go_float(value: float) -> str:
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


def decode_body(raw: bytes, content_type: str, max_bytes: int) -> Any:
    """A JSON or YAML request body as a value; 400 (413 past the size limit) with kube's wording."""
    try:
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
            return load_yaml(raw, max_bytes)
        return load_json(raw, max_bytes)
    except DecodeError as exc:
        raise as_api_error(exc, yaml_body=content_type.endswith("yaml"), max_bytes=max_bytes) from exc


def as_api_error(exc: DecodeError, *, yaml_body: bool, max_bytes: int) -> errors.APIError:
    if exc.too_large:
        return errors.too_large(max_bytes)
    if yaml_body:
        return errors.bad_request(f"error decoding YAML: {exc}")
    return errors.bad_request(f"couldn't get version/kind; json parse error: {exc}")
