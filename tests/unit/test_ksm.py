"""KSM tuning as KubeVirt's virt-handler does it (oVirt MoM's rules): when it starts, boosts, decays and stops, the
sleep between scans, the node's overrides, and which nodes the KubeVirt CR's selector picks."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import cluster_config
from pykubevirt.handler.ksm import KsmState, meminfo, next_state

GIB_KB = 1024 * 1024
TOTAL = 16 * GIB_KB
PRESSURE = int(TOTAL * 0.1)  # 10% available: under the 20% line
RELAXED = int(TOTAL * 0.5)


def test_meminfo_reads_total_and_available() -> None:
    text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n"
    assert meminfo(text) == (24576000, 20000000)
    with pytest.raises(ValueError, match="failed to find total and available memory"):
        meminfo("MemTotal: 1 kB\n")


def test_under_pressure_ksm_starts_then_boosts_up_to_the_maximum() -> None:
    started = next_state({}, False, 0, TOTAL, PRESSURE)
    # 16 GiB in use of a 16 GiB host would sleep the 100 ms baseline; 14.4 GiB in use sleeps a little longer.
    assert started == KsmState(True, 100 * 16 * GIB_KB // (TOTAL - PRESSURE), 100)
    assert next_state({}, True, 100, TOTAL, PRESSURE).pages == 400
    assert next_state({}, True, 1200, TOTAL, PRESSURE).pages == 1250


def test_without_pressure_ksm_decays_and_stops_at_the_minimum_and_a_stopped_one_stays_stopped() -> None:
    assert next_state({}, True, 400, TOTAL, RELAXED) == KsmState(True, 100 * 16 * GIB_KB // (TOTAL - RELAXED), 350)
    stopped = next_state({}, True, 100, TOTAL, RELAXED)
    assert (stopped.running, stopped.pages) == (False, 64)
    assert next_state({}, False, 100, TOTAL, RELAXED) == KsmState(False)


def test_the_sleep_shrinks_with_more_memory_in_use_down_to_a_tenth_of_the_baseline() -> None:
    huge = 1024 * GIB_KB
    assert next_state({}, False, 0, huge, 0).sleep_ms == 10


def test_node_annotations_override_the_tuning_and_bad_ones_fall_back() -> None:
    forced = {"kubevirt.io/ksm-free-percent-override": "1.0", "kubevirt.io/ksm-pages-init-override": "500"}
    assert next_state(forced, False, 0, TOTAL, RELAXED) == KsmState(True, 100 * 16 * GIB_KB // (TOTAL - RELAXED), 500)
    # Out of bounds takes the default: a negative boost adds 300; a max under the min (64) is 1250 again.
    odd = {"kubevirt.io/ksm-pages-boost-override": "-5", "kubevirt.io/ksm-pages-max-override": "10"}
    assert next_state(odd, True, 100, TOTAL, PRESSURE).pages == 400
    assert next_state(odd, True, 1200, TOTAL, PRESSURE).pages == 1250
    # An init above the max it is bounded by falls back to its default.
    assert next_state({"kubevirt.io/ksm-pages-init-override": "5000"}, False, 0, TOTAL, PRESSURE).pages == 100
    assert next_state({"kubevirt.io/ksm-pages-boost-override": "x"}, True, 100, TOTAL, PRESSURE).pages == 400
    slow = {"kubevirt.io/ksm-sleep-ms-baseline-override": "1000"}
    assert next_state(slow, False, 0, TOTAL, 0).sleep_ms == 1000


def ksm_selector(conf: dict[str, Any]) -> LabelSelector | None:
    return cluster_config({"spec": {"configuration": conf}}, ClusterConfig()).ksm_node_selector


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a ksmConfiguration with this nodeLabelSelector (None: the field left out) picks a node so labelled."""
    configured = ksm_selector({"ksmConfiguration": {} if selector is None else {"nodeLabelSelector": selector}})
    return configured is not None and configured.matches(labels)


def test_the_selector_picks_nodes_as_kubevirt_reads_it() -> None:
    assert ksm_selector({}) is None  # no ksmConfiguration: KSM is not handled
    assert not selects(None, {"a": "b"})  # ksmConfiguration without a selector
    assert selects({}, {})  # an empty selector: every node
    assert selects({"matchLabels": {"ksm": "on"}}, {"ksm": "on"})
    assert not selects({"matchLabels": {"ksm": "on"}}, {"ksm": "off"})
    assert not selects({"matchExpressions": [{"key": "k", "operator": "Bad"}]}, {"k": "v"})
