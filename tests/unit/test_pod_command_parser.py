"""The pods' commands share one argument parser (a node's fork server builds it before forking their containers)."""

from __future__ import annotations

import pytest

from pykubevirt.cli.main import build_parser, pod_parser
from pykubevirt.node import fork_server


def launcher_args(*extra: str) -> list[str]:
    return ["virt-launcher", "--name", "vm1", "--uid", "u1", "--namespace", "default", *extra]


def test_the_fork_server_builds_the_pods_parser_before_forking() -> None:
    pod_parser.cache_clear()
    fork_server.preload()
    assert pod_parser.cache_info().currsize == 1
    pod_parser().parse_args(launcher_args())
    assert pod_parser.cache_info().misses == 1


def test_one_parse_leaves_nothing_behind_for_the_next() -> None:
    first = pod_parser().parse_args(launcher_args("--qemu-timeout", "9s", "--grace-period-seconds", "5"))
    second = pod_parser().parse_args(launcher_args())
    fresh = build_parser(pod_command=True).parse_args(launcher_args())
    assert (first.qemu_timeout, first.grace_period_seconds) == ("9s", 5)
    assert vars(second) == vars(fresh)


def test_a_bad_argument_still_fails_as_argparse_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        pod_parser().parse_args(launcher_args("--no-such-flag"))
    assert exited.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
