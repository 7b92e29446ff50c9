"""libvirt's own log: the filters KubeVirt's debug-log options call for, and its lines relayed into the launcher's.

Both libvirts a launcher runs write lines like "2026-12-05 17:44:01.123+0000: 1234: error : qemuDomainLookupByName:1416
: Domain not found"; KubeVirt's virt-launcher shows them as its own JSON lines with `subcomponent: libvirt`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO

log = logging.getLogger("pykubevirt.launcher.libvirt_log")
# libvirt's own lines, from the embedded driver and a migration target's daemon alike. libvirt's filters decide which
# it writes, so none is dropped here for its level (the launcher's log is at info).
relayed = logging.getLogger("pykubevirt.launcher.libvirt")
relayed.setLevel(logging.DEBUG)
# The launcher's verbosity (KubeVirt's launcher pod env): it picks libvirt's debug categories and the agent rule below.
VERBOSITY_ENV = "VIRT_LAUNCHER_LOG_VERBOSITY"

# KubeVirt's virt-launcher (getLibvirtLogFilters): libvirt's debug logs are on from this launcher verbosity up, or
# with LIBVIRT_DEBUG_LOGS; each step of verbosity keeps fewer noisy categories at warnings.
DEBUG_VERBOSITY_THRESHOLD = 5
_QUIET = "3:remote 4:event 3:util.json 3:util.object 3:util.dbus 3:util.netlink 3:node_device 3:rpc 3:access"
_QUIET_BY_VERBOSITY = {
    DEBUG_VERBOSITY_THRESHOLD: _QUIET + " 3:util.threadjob 3:cpu.cpu 3:qemu.qemu_monitor 3:qemu.qemu_monitor_json"
    " 3:conf.domain_addr",
    DEBUG_VERBOSITY_THRESHOLD + 1: _QUIET + " 3:util.threadjob 3:cpu.cpu 3:qemu.qemu_monitor",
    DEBUG_VERBOSITY_THRESHOLD + 2: _QUIET + " 3:util.threadjob 3:cpu.cpu",
}
# libvirt's message for an agent command the guest failed, and the verbosity from which KubeVirt shows it.
AGENT_COMMAND_FAILED = "unable to execute QEMU agent command"
AGENT_COMMAND_ERRORS_VERBOSITY = 4
# What a filter list holds ("1:qemu 3:remote 4:*"): nothing that could end the quoted value in libvirtd.conf.
_FILTERS = re.compile(r"^[0-9A-Za-z_.:*+ -]+$")

# One line of libvirt's log: "2026-12-05 17:44:01.123+0000: 1234: error : qemuDomainLookupByName:1416 : Domain not …";
# the function and line are missing from a few ("… info : libvirt version: 9.0.0").
_LOG_LINE = re.compile(r"^\S+ \S+: (\d+): (debug|info|warning|error) : (.*)$")
_POSITION = re.compile(r"^(\w+:\d+) : (.*)$")
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


@dataclass(frozen=True)
class LibvirtLogLine:
    """One line of libvirt's log, as KubeVirt's virt-launcher shows it: level, msg, pos and thread."""

    level: int
    message: str
    position: str | None = None
    thread: str | None = None


def libvirt_log_record(line: str) -> LibvirtLogLine:
    """The parts of one line libvirt writes; a line not in libvirt's format (the daemon's mount steps' shell, a child
    process) is a warning as it stands."""
    matched = _LOG_LINE.match(line)
    if matched is None:
        return LibvirtLogLine(logging.WARNING, line)
    thread, level, rest = matched.groups()
    positioned = _POSITION.match(rest)
    if positioned is None:
        return LibvirtLogLine(_LOG_LEVELS[level], rest, thread=thread)
    return LibvirtLogLine(_LOG_LEVELS[level], positioned.group(2), positioned.group(1), thread)


def relay_libvirt_lines(lines: Iterable[str], logger: logging.Logger, verbosity: str | None = None) -> None:
    """Log libvirt's lines again through `logger`, as KubeVirt's virt-launcher shows them (`subcomponent: libvirt`,
    libvirt's level, function:line and thread); an indented line carries on the libvirt line before it.

    As in KubeVirt (LogLibvirtLogLine), a guest agent command the guest failed is a warning shown from launcher
    verbosity 4 up: an agent without some command would otherwise put an error in the log at every poll."""
    agent_errors = _verbosity(verbosity) >= AGENT_COMMAND_ERRORS_VERBOSITY
    previous: LibvirtLogLine | None = None
    for text in lines:
        if not text.strip():
            continue
        parsed = libvirt_log_record(text)
        if parsed.thread is None and previous is not None and text[:1].isspace():
            parsed = replace(previous, message=text.strip())
        else:
            previous = parsed if parsed.thread is not None else None
        if parsed.thread is not None and AGENT_COMMAND_FAILED in parsed.message:
            if not agent_errors:
                continue
            parsed = replace(parsed, level=logging.WARNING)
        extra = {"position": parsed.position, "libvirt_thread": parsed.thread}
        if parsed.thread is not None:
            extra["subcomponent"] = "libvirt"
        logger.log(parsed.level, "%s", parsed.message, extra=extra)


def relay_libvirt_stream(stream: IO[bytes], copy: IO[bytes] | None = None) -> None:
    """Relay a libvirt's stderr line by line until it ends, at the launcher's verbosity; `copy` keeps the raw lines."""
    relay_libvirt_lines(_decoded_lines(stream, copy), relayed, os.environ.get(VERBOSITY_ENV))


def _decoded_lines(stream: IO[bytes], copy: IO[bytes] | None) -> Iterator[str]:
    for line in iter(stream.readline, b""):
        if copy is not None:
            copy.write(line)
        yield line.decode(errors="replace").rstrip()


def debug_log_filters(custom: str, verbosity: str | None, debug_logs: bool) -> str | None:
    """libvirt's log filters for the launcher's `--libvirt-log-filters`, VIRT_LAUNCHER_LOG_VERBOSITY and
    LIBVIRT_DEBUG_LOGS, or None for warnings and errors only; a custom list that is not one is ignored."""
    if custom and _FILTERS.match(custom):
        return custom
    if custom:
        log.warning("ignoring libvirt log filters %r: not a list of level:category filters", custom)
    level = _verbosity(verbosity)
    if level < DEBUG_VERBOSITY_THRESHOLD:
        if not debug_logs:
            return None
        level = DEBUG_VERBOSITY_THRESHOLD + 5
    return _QUIET_BY_VERBOSITY.get(level, _QUIET) + " 1:*"


def _verbosity(value: str | None) -> int:
    """VIRT_LAUNCHER_LOG_VERBOSITY as a number; -1 when unset or not one."""
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1
