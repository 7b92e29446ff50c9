"""Log verbosity from the KubeVirt object's developerConfiguration.logVerbosity: how the components read it, how the
launcher pod carries it, and what `virtctl adm log-verbosity` shows and patches."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from pykubevirt import log
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import cluster_config
from pykubevirt.virtctl import log_verbosity as lv
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser
from tests.unit.test_launcher_pod import SETTINGS, compute, new_vmi, render


def kubevirt(levels: dict[str, Any] | None, *, developer: bool = True) -> dict[str, Any]:
    configuration: dict[str, Any] = {}
    if developer:
        configuration["developerConfiguration"] = {} if levels is None else {"logVerbosity": levels}
    return {"metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {"configuration": configuration}}


def test_components_read_their_level_a_nodes_level_first_and_2_by_default() -> None:
    levels = {"virtHandler": 5, "virtAPI": 0, "virtLauncher": "x", "nodeVerbosity": {"node01": 8, "node02": 0}}
    config = cluster_config(kubevirt(levels), ClusterConfig())
    assert config.verbosity("virtHandler") == 5
    assert config.verbosity("virtHandler", "node01") == 8
    assert config.verbosity("virtHandler", "node02") == 5  # 0 is unset, as in KubeVirt
    assert config.verbosity("virtAPI") == 0 and config.verbosity("virtLauncher") == 2  # "x" is no level
    assert ClusterConfig().verbosity("virtController") == 2


@pytest.fixture
def root_level(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process at the default verbosity, logging at info, as `log.configure` leaves a component."""
    before = logging.getLogger().level
    monkeypatch.setattr(log, "_verbosity", log.DEFAULT_VERBOSITY)
    logging.getLogger().setLevel(logging.INFO)
    yield
    logging.getLogger().setLevel(before)


def test_verbosity_3_and_above_writes_debug_lines(root_level: None) -> None:
    log.set_verbosity(2)
    assert logging.getLogger().level == logging.INFO
    assert log.set_verbosity(3) is True and logging.getLogger().level == logging.DEBUG
    assert log.set_verbosity(7) is False
    assert log.set_verbosity(1) is True and logging.getLogger().level == logging.INFO


def test_the_launcher_gets_the_clusters_verbosity_unless_its_vmi_has_one() -> None:
    def env_of(vmi: dict[str, Any], launcher: int) -> dict[str, Any]:
        levels = (("virtLauncher", launcher),) if launcher != 2 else ()
        settings = replace(SETTINGS, cluster=ClusterConfig(log_verbosity=levels))
        return {e["name"]: e.get("value") for e in compute(render(vmi, settings))["env"]}

    assert "VIRT_LAUNCHER_LOG_VERBOSITY" not in env_of(new_vmi(), 2)
    env = env_of(new_vmi(), 7)
    assert env["VIRT_LAUNCHER_LOG_VERBOSITY"] == "7" and env["LIBVIRT_DEBUG_LOGS"] == "1"
    labelled = new_vmi()
    labelled["metadata"]["labels"] = {"logVerbosity": "3"}
    assert env_of(labelled, 7)["VIRT_LAUNCHER_LOG_VERBOSITY"] == "3"


def parse(*argv: str) -> Any:
    return build_parser().parse_args(["adm", "log-verbosity", *argv])


def test_show_lists_the_components_asked_for_with_the_defaults_filled_in() -> None:
    args = parse("--virt-handler", "--virt-api")
    assert lv.operation(args) == "show"
    assert lv.show_lines(args, {"virtHandler": 7}) == ["virt-api=2", "virt-handler=7"]
    everything = parse("--all")
    assert lv.show_lines(everything, {}) == [
        "virt-api=2",
        "virt-controller=2",
        "virt-handler=2",
        "virt-launcher=2",
        "virt-operator=2",
    ]
    assert lv.operation(parse("--virt-api=10")) == "show"  # KubeVirt's NoOptDefVal


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--virt-api", "--virt-handler=3"], "only show or set is allowed"),
        (["--virt-api=12"], "virt-api: log verbosity must be 0-9"),
        (
            ["--reset", "--all=2"],
            "if any flags in the group [reset all] are set none of the others can be; [all reset] were all set",
        ),
    ],
)
def test_refusals(argv: list[str], message: str) -> None:
    with pytest.raises(VirtctlError) as refused:
        lv.operation(parse(*argv))
    assert str(refused.value) == message
    assert lv.operation(parse()) == ""


def test_set_adds_the_levels_keeping_the_others_and_reset_empties_them_first() -> None:
    current = kubevirt({"virtHandler": 7, "virtAPI": 4})
    assert lv.set_patch(parse("--virt-launcher=3"), current) == [
        {"op": "add", "path": lv.VERBOSITY_PATH, "value": {"virtHandler": 7, "virtAPI": 4, "virtLauncher": 3}}
    ]
    assert lv.set_patch(parse("--all=3", "--virt-handler=7"), kubevirt(None)) == [
        {
            "op": "add",
            "path": lv.VERBOSITY_PATH,
            "value": {"virtAPI": 3, "virtController": 3, "virtHandler": 7, "virtLauncher": 3, "virtOperator": 3},
        }
    ]
    assert lv.set_patch(parse("--reset", "--virt-handler=7"), current) == [
        {"op": "add", "path": lv.VERBOSITY_PATH, "value": {}},
        {"op": "add", "path": lv.VERBOSITY_PATH, "value": {"virtHandler": 7}},
    ]
    # Nothing to reset: no patch. Without a developerConfiguration, it is added first.
    assert lv.set_patch(parse("--reset"), kubevirt(None)) == []
    assert lv.set_patch(parse("--virt-api=1"), kubevirt(None, developer=False)) == [
        {"op": "add", "path": lv.DEVELOPER_PATH, "value": {}},
        {"op": "add", "path": lv.VERBOSITY_PATH, "value": {"virtAPI": 1}},
    ]
