"""deploy/monitoring: the ServiceMonitor and KubeVirt's alerting rules parse, render, and read metrics that exist."""

from __future__ import annotations

import re
from typing import Any

import yaml

from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.cluster_metrics import ControllerCollector
from pykubevirt.handler.domain_stats_scrape import CATALOG
from tests.paths import REPO
from tests.support.deploy_manifests import render

MONITORING = REPO / "deploy" / "monitoring"
# What the rules may read besides pykubevirt's metrics: Prometheus' own and kube-state-metrics'.
EXTERNAL = re.compile(r"^(up|vector|kube_[a-z_]+)$")
KEYWORDS = {"sum", "count", "rate", "by", "and", "or", "on", "max_over_time", "namespace", "node", "vmi", "resource"}


def documents() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(MONITORING.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found[document["kind"]] = document
    return found


def served_metrics() -> set[str]:
    served = {d.name for d in CATALOG} | {"kubevirt_rest_client_requests_total", "kubevirt_vmi_migration_succeeded"}
    collector = ControllerCollector(
        vmis=lambda: [],
        pods=lambda: [],
        migrations=lambda: [],
        config=ClusterConfig,
        leading=lambda: True,
        ready=lambda: True,
    )
    return served | {m.name for m in collector.collect()}


def test_the_kustomization_renders_a_service_its_monitor_and_the_rules() -> None:
    kinds = sorted(o["kind"] for o in render(MONITORING))
    assert kinds == ["PrometheusRule", "Service", "ServiceMonitor"]
    docs = documents()
    monitor, service = docs["ServiceMonitor"], docs["Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {p["name"] for p in service["spec"]["ports"]}


def test_kubevirts_alerts_are_there_and_read_only_metrics_that_exist() -> None:
    groups = documents()["PrometheusRule"]["spec"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    alerts = {rule["alert"]: rule for rule in rules if "alert" in rule}
    recorded = {rule["record"] for rule in rules if "record" in rule}
    assert {"VirtHandlerDaemonSetRolloutFailing", "KubeVirtVMIExcessiveMigrations", "LowKVMNodesCount"} <= set(alerts)
    # KubeVirt's deprecated name of the migration data counter, kept as a recording rule.
    assert "kubevirt_vmi_migration_data_total_bytes" in recorded
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert alert["annotations"]["summary"], name
    served = served_metrics()
    for rule in rules:
        expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|'[^']*'|\"[^\"]*\"", "", str(rule["expr"]))
        for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
            if word in KEYWORDS or EXTERNAL.match(word):
                continue
            assert word in served or word in recorded, f"{rule.get('alert') or rule.get('record')} reads {word}"
