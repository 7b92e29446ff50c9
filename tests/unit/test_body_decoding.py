"""Request bodies within kube-apiserver's limits: no NaN, bounded alias expansion and nesting, size after decoding."""

from __future__ import annotations

import json

import pytest

from pykubevirt.api import errors
from pykubevirt.apiserver import patching
from pykubevirt.apiserver.body_decoding import (
    MAX_DEPTH,
    DecodeError,
    check_value,
    decode_body,
    load_json,
    load_yaml,
    surely_within_limits,
    value_surely_within_limits,
)

LIMIT = 3 * 1024 * 1024


def billion_laughs(levels: int) -> bytes:
    """A YAML body whose every level references the one before ten times."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels + 1):
        refs = ",".join(f"*a{level - 1}" for _ in range(10))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def test_yaml_aliases_cannot_expand_past_the_request_limit() -> None:
    body = billion_laughs(6)
    assert len(body) < 1000
    with pytest.raises(DecodeError) as caught:
        load_yaml(body, LIMIT)
    assert caught.value.too_large
    with pytest.raises(errors.APIError) as reply:
        decode_body(billion_laughs(8), "application/yaml", LIMIT)
    assert reply.value.code == 413


def test_yaml_aliases_within_the_limit_are_fine() -> None:
    assert load_yaml(b"a: &x {k: v}\nb: *x\n", LIMIT) == {"a": {"k": "v"}, "b": {"k": "v"}}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_rejects_nan_and_infinity(constant: str) -> None:
    with pytest.raises(errors.APIError) as caught:
        decode_body(f'{{"data": {{"a": {constant}}}}}'.encode(), "application/json", LIMIT)
    assert caught.value.code == 400
    assert "invalid character 'N'" in caught.value.message or "invalid character 'I'" in caught.value.message


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_yaml_rejects_nan_and_infinity(value: str) -> None:
    with pytest.raises(errors.APIError) as caught:
        decode_body(f"data: {value}\n".encode(), "application/yaml", LIMIT)
    assert caught.value.code == 400
    assert "json: unsupported value" in caught.value.message


def test_yaml_values_without_a_json_form_are_rejected() -> None:
    with pytest.raises(errors.APIError) as caught:
        decode_body(b"when: 2024-01-01 10:00:00\n", "application/yaml", LIMIT)
    assert caught.value.code == 400
    with pytest.raises(errors.APIError):
        decode_body(b"{1: a}\n", "application/yaml", LIMIT)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000, 100_000])
def test_json_nesting_is_bounded(depth: int) -> None:
    body = ("[" * depth + "]" * depth).encode()
    with pytest.raises(errors.APIError) as caught:
        decode_body(body, "application/json", LIMIT)
    assert caught.value.code == 400
    assert "exceeded max depth" in caught.value.message


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
def test_yaml_nesting_is_bounded(depth: int) -> None:
    body = ("[" * depth + "]" * depth).encode()
    with pytest.raises(errors.APIError) as caught:
        decode_body(body, "application/yaml", LIMIT)
    assert caught.value.code == 400


def test_nesting_up_to_the_limit_decodes() -> None:
    body = ('{"a":' * MAX_DEPTH + "1" + "}" * MAX_DEPTH).encode()
    assert isinstance(load_json(body, LIMIT), dict)


@pytest.mark.parametrize("patch_type", [patching.MERGE_PATCH, patching.STRATEGIC_MERGE_PATCH, patching.JSON_PATCH])
def test_patch_bodies_have_the_same_limits(patch_type: str) -> None:
    deep = ('{"a":' * 10_000 + "1" + "}" * 10_000).encode()
    with pytest.raises(errors.APIError) as caught:
        patching.decode_patch(deep, patch_type)
    assert caught.value.code == 400
    with pytest.raises(errors.APIError) as caught:
        patching.decode_patch(b'{"a": NaN}', patch_type)
    assert caught.value.code == 400


def test_apply_patches_have_the_yaml_limits() -> None:
    with pytest.raises(errors.APIError) as caught:
        patching.decode_patch(billion_laughs(8), patching.APPLY_PATCH)
    assert caught.value.code == 413


def test_the_size_limit_counts_the_decoded_value() -> None:
    value = {"data": {f"k{i}": "v" * 1000 for i in range(100)}}
    raw = json.dumps(value).encode()
    assert load_json(raw, LIMIT) == value
    with pytest.raises(DecodeError) as caught:
        load_json(raw, 50_000)
    assert caught.value.too_large


def test_many_shallow_brackets_are_not_mistaken_for_depth() -> None:
    value = {"items": [{"a": [1]} for _ in range(MAX_DEPTH)]}
    encoded = json.dumps(value).encode()
    assert not surely_within_limits(encoded, LIMIT)
    assert load_json(encoded, LIMIT) == value
    assert surely_within_limits(json.dumps(value["items"][:10]).encode(), LIMIT)


@pytest.mark.parametrize(
    "value",
    [
        [0] * 1000,
        {f"{i}": None for i in range(1000)},
        [[]] * 500,
        [{}] * 500,
        {"": [1.5, True, None, 0, ""] * 200},
        {"a": {"b": {"c": [0, 1, 2]}}},
    ],
)
def test_the_walk_never_counts_more_than_five_bytes_a_byte_of_json(value: object) -> None:
    """What lets `surely_within_limits` skip the walk: a budget of five times the text's length is never overdrawn."""
    encoded = json.dumps(value, separators=(",", ":")).encode()
    check_value(value, len(encoded) * 5)
    with pytest.raises(DecodeError):
        check_value(value, len(encoded) // 2)


def _nested(depth: int) -> object:
    value: object = {"leaf": 1}
    for level in range(depth - 1):
        value = {"d": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 5])
def test_a_value_that_surely_passes_the_walk_does_pass_it(depth: int) -> None:
    value = _nested(depth)
    surely = value_surely_within_limits(value, LIMIT)
    if depth > MAX_DEPTH:
        assert not surely
        with pytest.raises(DecodeError, match="exceeded max depth"):
            check_value(value, LIMIT)
    else:
        check_value(value, LIMIT)
        assert surely or depth == MAX_DEPTH  # scalars inside the deepest level sit on a line as deep


def test_an_object_of_real_size_surely_passes_without_the_walk() -> None:
    pod = {
        "metadata": {"name": "p", "managedFields": [{"manager": "m", "fieldsV1": b'{"f:spec":{"f:x":{}}}'}]},
        "spec": {"containers": [{"name": f"c{i}", "env": [{"name": "A", "value": "1"}]} for i in range(MAX_DEPTH)]},
    }
    assert not surely_within_limits(json.dumps({**pod, "metadata": {}}).encode(), LIMIT)
    assert value_surely_within_limits(pod, LIMIT)
    assert not value_surely_within_limits(pod, 1000)
    with pytest.raises(DecodeError):
        check_value(pod, 1000)
    # What orjson cannot encode (an integer past 64 bits) is left to the walk.
    assert not value_surely_within_limits({"big": 2**70}, LIMIT)
