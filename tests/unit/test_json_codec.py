"""The hot-path JSON codec writes and reads exactly what the json module does, orjson's gaps included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubevirt.api import json_codec


@pytest.mark.parametrize(
    "value",
    [
        {"metadata": {"name": "vm", "labels": {"kubevirt.io/vm": "vm"}}, "spec": {"list": [1, 2.5, None, True, "x"]}},
        {"name": "généré ☃", "quote": 'a "b" \\ c\n'},
        {"big": 2**70, "negative": -(2**65)},  # beyond orjson's 64 bits
        {"lone": "\ud800"},  # a lone surrogate, which json.loads accepts and orjson refuses
        [],
        "text",
    ],
)
def test_values_round_trip_as_the_json_module_reads_them(value: Any) -> None:
    encoded = json_codec.dumps(value)
    assert isinstance(encoded, bytes)
    assert json.loads(encoded) == value
    assert json_codec.loads(encoded) == value
    assert json_codec.loads(encoded.decode()) == value
    assert json_codec.loads(json.dumps(value)) == value


def test_the_text_is_compact_and_in_the_key_order_given() -> None:
    assert json_codec.dumps_text({"b": 1, "a": [1, {"c": None}]}) == '{"b":1,"a":[1,{"c":null}]}'


def test_keys_that_are_not_strings_are_written_as_the_json_module_writes_them() -> None:
    value = {1: "one", 2.5: "half", None: "none"}
    expected = b'{"1":"one","2.5":"half","null":"none"}'
    assert json_codec.dumps(value) == json.dumps(value, separators=(",", ":")).encode() == expected


@pytest.mark.parametrize("text", [b"", b"{", b'{"a":1,}', b"[1 2]", b"\xff"])
def test_what_is_not_json_is_a_value_error(text: bytes) -> None:
    with pytest.raises(ValueError):
        json_codec.loads(text)
