"""copy_json gives a copy that shares nothing mutable with its source, whatever the source holds."""

from __future__ import annotations

from collections import OrderedDict

from pykubevirt.api.json_copy import copy_json


def test_a_copy_is_equal_and_independent_at_every_level() -> None:
    source = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [{"x": 1}, [2, 3]], "n": 2**80, "f": 0.5}}
    copy = copy_json(source)
    assert copy == source and list(copy) == list(source)
    copy["metadata"]["labels"]["a"] = "2"
    copy["spec"]["list"][0]["x"] = 9
    copy["spec"]["list"][1].append(4)
    assert source == {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [{"x": 1}, [2, 3]], "n": 2**80, "f": 0.5}}


def test_a_subtree_that_appears_twice_is_copied_twice() -> None:
    shared = {"k": "v"}
    copy = copy_json({"a": shared, "b": shared})
    copy["a"]["k"] = "changed"
    assert copy["b"] == {"k": "v"}


def test_values_that_are_not_plain_json_are_still_copied_around() -> None:
    ordered = OrderedDict(z=1)
    copy = copy_json({"plain": {"x": [1]}, "ordered": ordered})
    assert copy == {"plain": {"x": [1]}, "ordered": ordered}
    copy["plain"]["x"].append(2)
    assert ordered == OrderedDict(z=1)
