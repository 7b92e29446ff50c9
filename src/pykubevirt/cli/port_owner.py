"""Who holds a TCP port: the listening socket's inode from /proc/net/tcp{,6}, then the process with that inode open.

This is what `ss -ltnp` does; reading /proc directly keeps it free of parsing another tool's output.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

LISTEN_STATE = "0A"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket of /proc/net/tcp or tcp6."""

    host: Address
    port: int
    inode: int


@dataclass(frozen=True, slots=True)
class PortOwner:
    pid: int
    name: str


def _decode_host(hex_address: str) -> Address:
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host byte order (little-endian here).
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def parse_listeners(text: str) -> list[Listener]:
    """The LISTEN sockets of a /proc/net/tcp or /proc/net/tcp6 table."""
    listeners = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN_STATE:
            continue
        host, _, port = fields[1].partition(":")
        listeners.append(Listener(_decode_host(host), int(port, 16), int(fields[9])))
    return listeners


def _covers(listener: Address, wanted: Address) -> bool:
    """Whether a socket bound to `listener` takes connections for `wanted` (wildcards cover everything)."""
    if listener.is_unspecified or wanted.is_unspecified:
        return True
    if isinstance(listener, ipaddress.IPv6Address) and listener.ipv4_mapped is not None:
        listener = listener.ipv4_mapped
    return listener == wanted


def matching_inodes(listeners: list[Listener], host: str, port: int) -> list[int]:
    """Inodes of the sockets that stop `host:port` from being bound."""
    try:
        wanted: Address = ipaddress.ip_address(host)
    except ValueError:
        wanted = ipaddress.ip_address("0.0.0.0")  # a name: any listener on the port may be the one
    return [entry.inode for entry in listeners if entry.port == port and _covers(entry.host, wanted)]


def socket_owner(inode: int, proc: Path = Path("/proc")) -> PortOwner | None:
    """The first process with socket `inode` open (None when it lives in another PID namespace or we may not look)."""
    target = f"socket:[{inode}]"
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in os.scandir(pid_dir / "fd"):
                if os.readlink(fd.path) == target:
                    name = (pid_dir / "comm").read_text().strip()
                    return PortOwner(int(pid_dir.name), name)
        except OSError:
            continue
    return None


def port_owner(host: str, port: int, proc: Path = Path("/proc")) -> PortOwner | None:
    """The process listening where `host:port` would bind, when this host shows it."""
    listeners: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            listeners += parse_listeners((proc / "net" / table).read_text())
        except OSError:
            continue
    for inode in matching_inodes(listeners, host, port):
        owner = socket_owner(inode, proc)
        if owner is not None:
            return owner
    return None


def port_in_use(host: str, port: int) -> bool:
    """Whether binding `host:port` fails with EADDRINUSE, trying it as the API server would (SO_REUSEADDR)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def in_use_message(
    host: str, port: int, owner: PortOwner | None, fix: str = "pass --listen HOST:PORT or stop it"
) -> str:
    """The one line that says who holds the port and what to do."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    holder = f" (pid {owner.pid}, {owner.name})" if owner else ""
    return f"{shown} is in use{holder}; {fix}"
