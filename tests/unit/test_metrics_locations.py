"""`pykubevirt status`'s table of where each component serves /metrics."""

from __future__ import annotations

from pathlib import Path

from pykubevirt.cli.metrics_locations import handler_addresses, metrics_rows, recorded_address


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
