"""Which libvirt debug categories a migration target's daemon logs, by KubeVirt's rules for its launcher."""

from __future__ import annotations

import pytest

from pykubevirt.launcher.libvirt_log import DEBUG_VERBOSITY_THRESHOLD, debug_log_filters

NOISY = "3:remote 4:event 3:util.json 3:util.object 3:util.dbus 3:util.netlink 3:node_device 3:rpc 3:access"


def test_without_any_option_only_warnings_and_errors_are_logged() -> None:
    assert debug_log_filters("", None, debug_logs=False) is None
    assert debug_log_filters("", str(DEBUG_VERBOSITY_THRESHOLD - 1), debug_logs=False) is None


def test_custom_filters_win_over_verbosity_and_debug_logs() -> None:
    assert debug_log_filters("1:qemu 3:*", "9", debug_logs=True) == "1:qemu 3:*"


@pytest.mark.parametrize(
    ("verbosity", "also_quiet"),
    [
        ("5", " 3:util.threadjob 3:cpu.cpu 3:qemu.qemu_monitor 3:qemu.qemu_monitor_json 3:conf.domain_addr"),
        ("6", " 3:util.threadjob 3:cpu.cpu 3:qemu.qemu_monitor"),
        ("7", " 3:util.threadjob 3:cpu.cpu"),
        ("8", ""),
        ("12", ""),
    ],
)
def test_more_verbosity_keeps_fewer_categories_quiet(verbosity: str, also_quiet: str) -> None:
    assert debug_log_filters("", verbosity, debug_logs=False) == NOISY + also_quiet + " 1:*"


def test_debug_logs_below_the_threshold_log_at_the_highest_verbosity() -> None:
    assert debug_log_filters("", None, debug_logs=True) == NOISY + " 1:*"
    assert debug_log_filters("", "not a number", debug_logs=True) == NOISY + " 1:*"


def test_a_custom_value_that_could_break_the_daemons_config_is_ignored() -> None:
    assert debug_log_filters('1:*"\nlisten_tcp = 1', None, debug_logs=False) is None
