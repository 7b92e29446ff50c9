"""evacuate/cancel's parts: the drain-taint refusal, the node it looks at, the patch, and its options."""

from __future__ import annotations

import pytest

from pykubevirt.api.errors import APIError
from pykubevirt.virtapi.evacuate_cancel import cancel_patch, drain_taint_refusal, evacuation_node
from pykubevirt.virtapi.options import parse_evacuate_cancel


def node(*taints: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n1"}, "spec": {"taints": list(taints)}}


def test_only_the_drain_taint_with_no_schedule_refuses() -> None:
    refusal = drain_taint_refusal(
        node({"key": "kubevirt.io/drain", "effect": "NoSchedule", "value": "x"}), "kubevirt.io/drain"
    )
    assert refusal is not None and refusal.code == 400
    assert refusal.message == (
        'Node "n1" has NodeDrainTaintKey "&Taint{Key:kubevirt.io/drain,Value:,Effect:NoSchedule,TimeAdded:<nil>,}"'
    )
    assert drain_taint_refusal(node({"key": "kubevirt.io/drain", "effect": "NoExecute"}), "kubevirt.io/drain") is None
    assert drain_taint_refusal(node({"key": "other", "effect": "NoSchedule"}), "kubevirt.io/drain") is None
    assert drain_taint_refusal({"metadata": {"name": "n1"}}, "kubevirt.io/drain") is None


def test_the_node_looked_at_and_the_patch() -> None:
    assert evacuation_node({"status": {"nodeName": "a", "evacuationNodeName": "b"}}) == "b"
    assert evacuation_node({"status": {"nodeName": "a"}}) == "a"
    assert cancel_patch("b") == [
        {"op": "test", "path": "/status/evacuationNodeName", "value": "b"},
        {"op": "remove", "path": "/status/evacuationNodeName"},
    ]


def test_options_decode_as_go_decodes_them() -> None:
    options = parse_evacuate_cancel(b'{"evacuationNodeName": "n1", "dryRun": ["All"]}')
    assert (options.evacuation_node_name, options.dry_run) == ("n1", ("All",))
    with pytest.raises(
        APIError,
        match=r"cannot unmarshal number into Go struct field EvacuateCancelOptions\.evacuationNodeName of type string",
    ):
        parse_evacuate_cancel(b'{"evacuationNodeName": 3}')
