"""libvirt's own log lines, as the private libvirtd writes them, in the parts KubeVirt's virt-launcher shows."""

from __future__ import annotations

import json
import logging

import pytest

from pykubevirt.launcher.libvirt_log import LibvirtLogLine, libvirt_log_record, relay_libvirt_lines
from pykubevirt.log import JSONFormatter


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (
            "2026-12-05 17:44:01.123+0000: 1234: error : qemuDomainObjBeginJobInternal:955 : Timed out during "
            "operation: cannot acquire state change lock",
            LibvirtLogLine(
                logging.ERROR,
                "Timed out during operation: cannot acquire state change lock",
                "qemuDomainObjBeginJobInternal:955",
                "1234",
            ),
        ),
        (
            "2026-12-05 17:44:01.123+0000: 77: warning : virSecurityManagerNew:194 : Configured security driver",
            LibvirtLogLine(logging.WARNING, "Configured security driver", "virSecurityManagerNew:194", "77"),
        ),
        (
            "2026-12-05 17:44:01.000+0000: 1: info : libvirt version: 9.0.0",
            LibvirtLogLine(logging.INFO, "libvirt version: 9.0.0", None, "1"),
        ),
        (
            "2026-12-05 17:44:01.000+0000: 9: debug : qemuMonitorIO:1 : x : y",
            LibvirtLogLine(logging.DEBUG, "x : y", "qemuMonitorIO:1", "9"),
        ),
    ],
)
def test_a_libvirt_line_keeps_its_level_position_and_thread_and_loses_its_timestamp(
    line: str, parsed: LibvirtLogLine
) -> None:
    assert libvirt_log_record(line) == parsed


def test_a_line_not_in_libvirts_format_is_a_warning_as_it_stands() -> None:
    line = "mount: /run/libvirt: mount point does not exist."
    assert libvirt_log_record(line) == LibvirtLogLine(logging.WARNING, line)


def test_a_relayed_line_is_formatted_with_libvirts_position_and_thread() -> None:
    record = logging.LogRecord(
        "pykubevirt.launcher.libvirtd", logging.ERROR, "libvirt_daemon.py", 1, "%s", ("boom",), None
    )
    record.__dict__.update(subcomponent="libvirt", position="virFoo:12", libvirt_thread="34")
    line = json.loads(JSONFormatter("virt-launcher").format(record))
    assert (line["msg"], line["pos"], line["subcomponent"], line["thread"]) == ("boom", "virFoo:12", "libvirt", "34")


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def relayed(lines: list[str], verbosity: str | None = None) -> list[tuple[int, str, str | None, str | None]]:
    logger = logging.getLogger("tests.libvirt_relay")
    logger.setLevel(logging.DEBUG)
    collected = Collected()
    logger.addHandler(collected)
    try:
        relay_libvirt_lines(lines, logger, verbosity)
    finally:
        logger.removeHandler(collected)
    return [
        (r.levelno, r.getMessage(), r.__dict__.get("position"), r.__dict__.get("subcomponent"))
        for r in collected.records
    ]


def test_the_indented_lines_of_a_message_carry_on_libvirts_line_before_them() -> None:
    lines = [
        '2026-12-05 19:54:02.258+0000: 7: debug : virConnectOpenInternal:958 : Split "test:///d" to URI components:',
        "  scheme test",
        "",
        "  server <null>",
        "a line of a child process",
        "  indented, but after no libvirt line",
    ]
    assert relayed(lines) == [
        (logging.DEBUG, 'Split "test:///d" to URI components:', "virConnectOpenInternal:958", "libvirt"),
        (logging.DEBUG, "scheme test", "virConnectOpenInternal:958", "libvirt"),
        (logging.DEBUG, "server <null>", "virConnectOpenInternal:958", "libvirt"),
        (logging.WARNING, "a line of a child process", None, None),
        (logging.WARNING, "  indented, but after no libvirt line", None, None),
    ]


def test_a_relayed_line_without_libvirts_position_has_none_rather_than_the_relays() -> None:
    record = logging.LogRecord("pykubevirt.launcher.libvirt", logging.INFO, "libvirt_log.py", 75, "%s", ("v",), None)
    record.__dict__.update(subcomponent="libvirt", position=None, libvirt_thread="34")
    line = json.loads(JSONFormatter("virt-launcher").format(record))
    assert "pos" not in line and line["msg"] == "v" and line["thread"] == "34"


AGENT_FAILURE = (
    "2026-12-05 20:02:49.016+0000: 62: error : qemuAgentCheckError:1050 : internal error: unable to execute QEMU agent "
    "command 'guest-get-users': The command guest-get-users has been disabled for this instance"
)


@pytest.mark.parametrize(("verbosity", "expected"), [(None, []), ("3", []), ("garbage", []), ("4", [logging.WARNING])])
def test_a_failed_guest_agent_command_is_a_warning_shown_from_verbosity_4_as_in_kubevirt(
    verbosity: str | None, expected: list[int]
) -> None:
    other_error = "2026-12-05 20:02:49.016+0000: 62: error : virCommandWait:2725 : internal error: Child process failed"
    lines = relayed([AGENT_FAILURE, other_error], verbosity)
    assert [level for level, message, _, _ in lines if "agent" in message] == expected
    assert [(level, message) for level, message, _, _ in lines if "agent" not in message] == [
        (logging.ERROR, "internal error: Child process failed")
    ]
