"""libvirt's own log lines, as the private libvirtd writes them, turned into a level and a message."""

from __future__ import annotations

import logging

import pytest

from pykubevirt.launcher.libvirt_daemon import libvirt_log_record


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        (
            "2026-12-05 17:44:01.123+0000: 1234: error : qemuDomainObjBeginJobInternal:955 : Timed out during "
            "operation: cannot acquire state change lock",
            logging.ERROR,
            "qemuDomainObjBeginJobInternal:955 : Timed out during operation: cannot acquire state change lock",
        ),
        (
            "2026-12-05 17:44:01.123+0000: 77: warning : virSecurityManagerNew:194 : Configured security driver",
            logging.WARNING,
            "virSecurityManagerNew:194 : Configured security driver",
        ),
        ("2026-12-05 17:44:01.000+0000: 1: info : libvirt version: 9.0.0", logging.INFO, "libvirt version: 9.0.0"),
        ("2026-12-05 17:44:01.000+0000: 1: debug : qemuMonitorIO:1 : x", logging.DEBUG, "qemuMonitorIO:1 : x"),
    ],
)
def test_a_libvirt_line_keeps_its_level_and_loses_its_timestamp_and_thread(line: str, level: int, message: str) -> None:
    assert libvirt_log_record(line) == (level, message)


def test_a_line_not_in_libvirts_format_is_a_warning_as_it_stands() -> None:
    line = "mount: /run/libvirt: mount point does not exist."
    assert libvirt_log_record(line) == (logging.WARNING, line)
