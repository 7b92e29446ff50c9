"""libvirt's own log: the filters KubeVirt's debug-log options call for, and its lines relayed into the launcher's.

Both libvirts a launcher runs write lines like "2026-12-05 17:44:01.123+0000: 1234: error : qemuDomainLookupByName:1416
: Domain not found"; KubeVirt's virt-launcher shows them as its own JSON lines with `subcomponent: libvirt`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO

log = logging.getLogger("pykubevirt.launcher.libvirt_log")

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


def relay_libvirt_lines(lines: Iterable[str], logger: logging.Logger) -> None:
    """Log libvirt's lines again through `logger`, as KubeVirt's virt-launcher shows them (`subcomponent: libvirt`,
    libvirt's level, function:line and thread); an indented line carries on the libvirt line before it."""
    previous: LibvirtLogLine | None = None
    for text in lines:
        if not text.strip():
            continue
        parsed = libvirt_log_record(text)
        if parsed.thread is None and previous is not None and text[:1].isspace():
            parsed = replace(previous, message=text.strip())
        else:
            previous = parsed if parsed.thread is not None else None
        extra = {"position": parsed.position, "libvirt_thread": parsed.thread}
        if parsed.thread is not None:
            extra["subcomponent"] = "libvirt"
        logger.log(parsed.level, "%s", parsed.message, extra=extra)


def decoded_lines(stream: IO[bytes], copy: IO[bytes] | None = None) -> Iterator[str]:
    """The stream's lines as text without their ends, each first written as it came to `copy`."""
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
    try:
        level = int(verbosity) if verbosity is not None else -1
    except ValueError:
        level = -1
    if level < DEBUG_VERBOSITY_THRESHOLD:
        if not debug_logs:
            return None
        level = DEBUG_VERBOSITY_THRESHOLD + 5
    return _QUIET_BY_VERBOSITY.get(level, _QUIET) + " 1:*"
