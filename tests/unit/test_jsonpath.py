"""The JSONPath subset printer columns use: fields, indexes, slices, filters, recursion; missing keys match nothing."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.apiserver.jsonpath import JSONPathError, compile_path, evaluate, first

VMI: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {
        "name": "testvmi",
        "labels": {"kubevirt.io/nodeName": "node01", "app": "web"},
        "annotations": {"kubevirt.io/latest-observed-api-version": "v1"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
    },
    "spec": {"domain": {"devices": {"disks": [{"name": "rootdisk"}, {"name": "cloudinit"}]}}},
    "status": {
        "phase": "Running",
        "nodeName": "node01",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable"},
            {"type": "Paused", "status": "False"},
        ],
        "interfaces": [
            {"ipAddress": "10.244.0.12", "ipAddresses": ["10.244.0.12", "fd10::c"], "name": "default"},
            {"ipAddress": "192.168.1.5", "name": "secondary"},
        ],
        "guestOSInfo": {},
        "memory": {"guestCurrent": "1Gi"},
        "migrationState": None,
        "counts": [1, 2, 3, 4, 5],
        "ratio": 1.5,
        "paused": False,
    },
}

CASES = [
    # KubeVirt's own printer columns
    (".status.conditions[?(@.type=='Ready')].status", ["True"]),
    (".status.conditions[?(@.type=='Paused')].status", ["False"]),
    (".status.conditions[?(@.type=='Missing')].status", []),
    (".status.interfaces[0].ipAddress", ["10.244.0.12"]),
    (".status.phase", ["Running"]),
    (".status.nodeName", ["node01"]),
    (".metadata.creationTimestamp", ["2024-01-01T00:00:00Z"]),
    # braces are optional; kubectl's relaxed form without the leading dot too
    ("{.status.phase}", ["Running"]),
    ("{ .status.phase }", ["Running"]),
    ("{$.status.phase}", ["Running"]),
    ("$.status.phase", ["Running"]),
    ("status.phase", ["Running"]),
    # indexes and slices
    (".status.interfaces[1].name", ["secondary"]),
    (".status.interfaces[-1].name", ["secondary"]),
    (".status.interfaces[-2].name", ["default"]),
    (".status.interfaces[2].name", []),
    (".status.interfaces[-3].name", []),
    (".status.interfaces[*].name", ["default", "secondary"]),
    (".status.interfaces[*].ipAddresses[1]", ["fd10::c"]),
    (".status.counts[1:3]", [2, 3]),
    (".status.counts[:2]", [1, 2]),
    (".status.counts[3:]", [4, 5]),
    (".status.counts[::2]", [1, 3, 5]),
    (".status.counts[-2:]", [4, 5]),
    (".status.counts[2:2]", []),
    (".status.counts[0:9]", []),
    (".status.counts[0,4]", [1, 5]),
    (".status.counts[*]", [1, 2, 3, 4, 5]),
    (".status.phase[0]", []),
    (".metadata[*]", []),
    # member names in brackets, escaped dots
    (".metadata.labels['kubevirt.io/nodeName']", ["node01"]),
    ('.metadata.labels["kubevirt.io/nodeName"]', ["node01"]),
    (".metadata.annotations['kubevirt.io/latest-observed-api-version']", ["v1"]),
    (".metadata.labels.kubevirt\\.io/nodeName", ["node01"]),
    (".metadata.labels['app','kubevirt.io/nodeName']", ["web", "node01"]),
    # filters
    (".status.conditions[?(@.type!='Ready')].type", ["LiveMigratable", "Paused"]),
    ('.status.conditions[?(@.type=="LiveMigratable")].reason', ["DisksNotLiveMigratable"]),
    (".status.conditions[?(@.reason)].type", ["LiveMigratable"]),
    (".status.conditions[?(@.reason != 'x')].type", ["LiveMigratable"]),
    (".status.conditions[?( @.type == 'Ready' )].status", ["True"]),
    (".status.counts[?(@ > 3)]", [4, 5]),
    (".status.counts[?(@ >= 3)]", [3, 4, 5]),
    (".status.counts[?(@ < 2)]", [1]),
    (".status.counts[?(@ <= 2.5)]", [1, 2]),
    (".status.counts[?(@ == 3)]", [3]),
    (".status.counts[?(@ == '3')]", []),
    (".status.interfaces[?(@.name=='secondary')].ipAddress", ["192.168.1.5"]),
    (
        ".status.conditions[?(@.status=='False')]",
        [
            {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable"},
            {"type": "Paused", "status": "False"},
        ],
    ),
    # wildcards and recursive descent
    (".spec.domain.devices.disks[*].name", ["rootdisk", "cloudinit"]),
    ("..disks[*].name", ["rootdisk", "cloudinit"]),
    (".spec..name", ["rootdisk", "cloudinit"]),
    ("..ipAddress", ["10.244.0.12", "192.168.1.5"]),
    (".status.memory.*", ["1Gi"]),
    (".metadata.labels.*", ["node01", "web"]),
    # missing keys and odd shapes never raise
    (".status.missing", []),
    (".status.missing.deeper[0]", []),
    (".status.phase.deeper", []),
    (".status.guestOSInfo.id", []),
    (".status.migrationState", [None]),
    (".status.migrationState.endTimestamp", []),
    (".status.paused", [False]),
    (".status.ratio", [1.5]),
]


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_evaluate(expression: str, expected: list[Any]) -> None:
    assert evaluate(expression, VMI) == expected


def test_first() -> None:
    assert first(".status.interfaces[*].name", VMI) == "default"
    assert first(".status.nothing", VMI) is None
    assert first("{.metadata.name}", VMI) == "testvmi"


def test_recursive_descent_includes_root_and_nested_lists() -> None:
    doc = {"name": "root", "items": [{"name": "a", "children": [{"name": "b"}]}, ["x", {"name": "c"}]]}
    assert evaluate("..name", doc) == ["root", "a", "b", "c"]


def test_compile_is_cached() -> None:
    assert compile_path("{.status.phase}") is compile_path("{.status.phase}")
    path = compile_path(".metadata.name")
    assert [path.first(o) for o in ({"metadata": {"name": "a"}}, {"metadata": {}}, {})] == ["a", None, None]


INVALID = [
    "",
    "{}",
    "{.status.phase",
    "{.a}{.b}",
    "x {.a}",
    ".a[",
    ".a[x]",
    ".a[1:2:0]",
    ".a[?(@.b=1)]",
    ".a[?(@.b=='x)]",
    ".a[?(@.b=='x')",
    ".a[?(@.b==nonsense)]",
    ".a.",
    ".a b",
    "{range .items[*]}{.name}{end}",
]


@pytest.mark.parametrize("expression", INVALID)
def test_invalid_expressions(expression: str) -> None:
    with pytest.raises(JSONPathError):
        compile_path(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (".a[0", "unterminated array"),
        (".a[?(@.b=='x)')", "unclosed array expect ]"),
        (".a[?(@.b=='x)", "unterminated filter"),
    ],
)
def test_unclosed_brackets(expression: str, message: str) -> None:
    with pytest.raises(JSONPathError, match=message):
        compile_path(expression)


def test_a_quoted_bracket_does_not_close() -> None:
    assert evaluate(".a['x]']", {"a": {"x]": 1}}) == [1]
    assert evaluate(".a[?(@.b==')')].c", {"a": [{"b": ")", "c": 2}, {"b": "(", "c": 3}]}) == [2]
