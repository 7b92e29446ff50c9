"""`pykubevirt status`'s table of where each component serves /metrics."""

from __future__ import annotations

from pathlib import Path

from pykubevirt.cli.metrics_locations import handler_addresses, metrics_rows, recorded_address
from pykubevirt.client.delegated_auth import Decision, bearer_token, status_body


def test_rows_name_the_api_server_controller_and_each_nodes_handler(tmp_path: Path) -> None:
    address_file = tmp_path / "virt-controller-metrics"
    assert recorded_address(address_file) == ""
    address_file.write_text("127.0.0.1:40123\n")
    nodes = [
        {"metadata": {"name": "node02", "annotations": {"pykubevirt.io/virt-handler-address": "127.1.2.2:38000"}}},
        {"metadata": {"name": "node01", "annotations": {"pykubevirt.io/virt-handler-address": "127.1.2.1:37000"}}},
        {"metadata": {"name": "node03"}},
    ]
    rows = metrics_rows("https://127.0.0.1:6443", recorded_address(address_file), handler_addresses(nodes))
    assert [row[:2] for row in rows] == [
        ("COMPONENT", "METRICS"),
        ("apiserver", "https://127.0.0.1:6443/metrics"),
        ("virt-controller", "http://127.0.0.1:40123/metrics"),
        ("virt-handler-node01", "http://127.1.2.1:37000/metrics"),
        ("virt-handler-node02", "http://127.1.2.2:38000/metrics"),
    ]
    assert "kubectl get --raw /metrics" in rows[1][2]


def test_only_a_bearer_token_is_taken_and_refusals_are_kube_statuses() -> None:
    assert bearer_token("Bearer abc ") == "abc"
    assert bearer_token("bearer abc") == "abc"
    assert bearer_token("Basic abc") == "" and bearer_token(None) == ""
    assert status_body(Decision(401))["reason"] == "Unauthorized"
    forbidden = status_body(Decision(403, 'user "u" cannot get path "/metrics"'))
    assert (forbidden["code"], forbidden["message"]) == (403, 'forbidden: user "u" cannot get path "/metrics"')
