"""The component commands share their client flags; a kubeconfig they cannot use is one readable line and exit 1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from pykubevirt.cli import handler_command
from pykubevirt.cli.main import build_parser

# Each component's own arguments, apart from the client flags.
COMMANDS = {
    "virt-controller": [],
    "scheduler": [],
    "virt-handler": ["--node-name", "node01"],
    "node": ["--name", "node01", "--data-dir", "DATA"],
    "virt-api": [],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unreadable_kubeconfig_is_one_line(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing-kubeconfig"
    args = [a.replace("DATA", str(tmp_path / "node")) for a in COMMANDS[command]]
    result = subprocess.run(
        [sys.executable, "-m", "pykubevirt.cli.main", command, *args, "--kubeconfig", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == f"error: cannot read kubeconfig {missing}: No such file or directory\n"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "qps", "burst"),
    [("virt-controller", 1000.0, 2000), ("scheduler", 200.0, 400), ("virt-handler", 200.0, 400), ("node", 100.0, 200)],
)
def test_client_flag_defaults_and_overrides(command: str, qps: float, burst: int) -> None:
    parser = build_parser()
    own = [a.replace("DATA", "/tmp/x") for a in COMMANDS[command]]
    defaults = parser.parse_args([command, *own])
    assert (defaults.kubeconfig, defaults.qps, defaults.burst) == (None, qps, burst)
    given = parser.parse_args([command, *own, "--kubeconfig", "k", "--qps", "5", "--burst", "7"])
    assert (given.kubeconfig, given.qps, given.burst) == ("k", 5.0, 7)


@pytest.mark.parametrize("command", [["apiserver", "--data-dir", "DATA"], ["virt-api"]])
def test_a_bad_listen_address_is_a_usage_error(command: list[str], tmp_path: Path) -> None:
    args = [a.replace("DATA", str(tmp_path / "data")) for a in command]
    result = subprocess.run(
        [sys.executable, "-m", "pykubevirt.cli.main", *args, "--listen", "6443"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith("error: argument --listen: must be HOST:PORT, got '6443'")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", [["apiserver", "--data-dir", "d"], ["virt-api"], ["validate", "-f", "-"]])
def test_listen_and_feature_gates_are_parsed_by_the_parser(command: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(command).feature_gates == frozenset()
    given = parser.parse_args([*command, "--feature-gates", " Snapshot,,HostDisk "])
    assert given.feature_gates == frozenset({"Snapshot", "HostDisk"})
    if command[0] != "validate":
        assert parser.parse_args([*command, "--listen", "[::1]:7443"]).listen == ("::1", 7443)


def test_leader_election_timing_flags_take_go_durations() -> None:
    parser = build_parser()
    defaults = parser.parse_args(["virt-controller"])
    assert (
        defaults.leader_elect_lease_duration,
        defaults.leader_elect_renew_deadline,
        defaults.leader_elect_retry_period,
    ) == (15.0, 10.0, 2.0)
    given = parser.parse_args(
        [
            "virt-controller",
            "--leader-elect-lease-duration=1m",
            "--leader-elect-renew-deadline=4.5s",
            "--leader-elect-retry-period=500ms",
        ]
    )
    assert (
        given.leader_elect_lease_duration,
        given.leader_elect_renew_deadline,
        given.leader_elect_retry_period,
    ) == (60.0, 4.5, 0.5)


@pytest.mark.parametrize("value", ["0s", "-1s", "15x", "s"])
def test_a_bad_duration_is_a_usage_error(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pykubevirt.cli.main", "virt-controller", f"--leader-elect-retry-period={value}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "is not a positive duration" in result.stderr


def test_inconsistent_leader_election_timing_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykubevirt.cli.main",
            "virt-controller",
            "--leader-elect-lease-duration=5s",
            "--leader-elect-renew-deadline=10s",
            "--kubeconfig",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == "error: leader election needs lease duration > renew deadline > retry period\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node-ip=10.0.0.5"], "--node-ip 10.0.0.5 is not a loopback address: virt-handler serves other"),
        (["--node-ip=10.0.0.5", "--mutual-tls"], "--mutual-tls needs --certificates-dir"),
    ],
)
def test_the_handler_leaves_loopback_only_over_mutual_tls(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["virt-handler", "--node-name=n1", *argv])
    # serve(), not the command's run(): that configures this process's logging and garbage collection for good.
    assert asyncio.run(handler_command.serve(args)) == 1
    assert message in capsys.readouterr().out
