"""apimachinery's name and label checks: valid names pass, invalid ones get Kubernetes' exact messages."""

from __future__ import annotations

import pytest

from pykubevirt.api.name_validation import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


@pytest.mark.parametrize("name", ["a", "my-name", "123-abc", "a" * 63])
def test_valid_labels(name: str) -> None:
    assert dns1123_label_errors(name) == []


def test_label_messages() -> None:
    assert dns1123_label_errors("a.b") == ["must not contain dots"]
    assert dns1123_label_errors("a" * 64) == ["must be no more than 63 characters"]
    assert dns1123_label_errors("Bad")[0].startswith("a lowercase RFC 1123 label must consist of")


@pytest.mark.parametrize("name", ["vm\n", "disk\n", "-x", "x-", "UPPER"])
def test_names_go_rejects_are_rejected(name: str) -> None:
    # Go's anchored regexps reject a trailing newline, which Python's `$` would let through.
    assert dns1123_label_errors(name)
    assert dns1123_subdomain_errors(name) == [SUBDOMAIN_MSG]


def test_subdomain_messages() -> None:
    assert dns1123_subdomain_errors("example.com") == []
    assert dns1123_subdomain_errors("a" * 254) == ["must be no more than 253 characters"]


def test_qualified_names_and_label_values() -> None:
    assert qualified_name_errors("kubevirt.io/schedulable") == []
    assert qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert qualified_name_errors("Bad_Prefix/x") == [f"prefix part {SUBDOMAIN_MSG}"]
    assert qualified_name_errors("a/" + "b" * 64) == ["name part must be no more than 63 characters"]
    assert label_value_errors("") == []
    assert label_value_errors("v\n") != []
