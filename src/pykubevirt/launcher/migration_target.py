"""The target side of a live migration: a private libvirtd that can receive the domain, and where it listens.

The target launcher prepares the VMI's disks as for a start (the block copy then fills them), records its pod's
directories for the daemon's migration hook, and reports the daemon's socket, the address incoming streams bind and
a free port for the block-copy server.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.launcher import migration_hook
from pykubevirt.launcher.libvirt_daemon import PrivateLibvirtd

# libvirt's own default range for incoming migration streams; its port allocator skips ports in use.
MIGRATION_PORTS = (49152, 49215)
DAEMON_DIR = "d"
PATHS_FILE = "target-paths.json"
# The daemon sees this pod's proxy directory at the migration proxy path, so a unix URI the source names there
# (where the source handler listens on its side) is where this pod's QEMU listens on this side.
PROXY_DIR = "mp"


def daemon(runtime: Path, listen_address: str, log_filters: str | None = None) -> PrivateLibvirtd:
    """The daemon of a target pod whose short runtime dir is `runtime`, logging `log_filters` (debug_log_filters)."""
    directory = runtime / DAEMON_DIR
    # libvirt refuses a `migration_address` of 127.0.0.1; for any loopback node address (an embedded node's) the
    # daemon binds its default, as the streams reach this pod through the handler's unix-socket proxies anyway.
    address = "" if _loopback(listen_address) else listen_address
    return PrivateLibvirtd(
        directory,
        migration_address=address,
        ports=MIGRATION_PORTS,
        hook=migration_hook.script(directory / PATHS_FILE),
        mounts=((PROXY_DIR, pod_layout.MIGRATION_PROXY_DIR),),
        log_filters=log_filters,
    )


def _loopback(address: str) -> bool:
    if address in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def proxy_dir(runtime: Path) -> Path:
    """Where this pod's incoming migration sockets appear on the host."""
    return runtime / DAEMON_DIR / PROXY_DIR


def record_paths(runtime: Path, paths: dict[str, str]) -> None:
    """Where this pod keeps the domain's files, for the migration hook."""
    (runtime / DAEMON_DIR / PATHS_FILE).write_text(json.dumps(paths))


def free_port(address: str) -> int:
    """A port the block-copy server can bind on `address` now (the source connects to it soon after)."""
    with socket.socket() as sock:
        sock.bind((address or "127.0.0.1", 0))
        return int(sock.getsockname()[1])
