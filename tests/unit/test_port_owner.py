"""The port-owner lookup: /proc/net/tcp parsing on recorded tables, and a real socket of this process found by inode."""

from __future__ import annotations

import ipaddress
import os
import socket

from pykubevirt.cli.port_owner import (
    Listener,
    in_use_message,
    matching_inodes,
    parse_listeners,
    port_in_use,
    port_owner,
)

# Lines of a real /proc/net/tcp: 127.0.0.1:6443 listening (inode 4242), 0.0.0.0:22 listening, one established socket.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0 100 0 0 10 0
   2: 0100007F:192B 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 5151 1 0 20 4 30 10 -1
"""
# /proc/net/tcp6: [::1]:6443 listening (inode 77).
TCP6 = (
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr ...\n"
    "   0: 00000000000000000000000001000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000"
    " 00:00000000 00000000     0        0 77 1 0 100 0 0 10 0\n"
)


def test_parse_listeners_keeps_only_listening_sockets() -> None:
    assert parse_listeners(TCP) == [
        Listener(ipaddress.ip_address("127.0.0.1"), 6443, 4242),
        Listener(ipaddress.ip_address("0.0.0.0"), 22, 17),
    ]
    assert parse_listeners(TCP6) == [Listener(ipaddress.ip_address("::1"), 6443, 77)]


def test_matching_inodes_honour_wildcards() -> None:
    listeners = parse_listeners(TCP)
    assert matching_inodes(listeners, "127.0.0.1", 6443) == [4242]
    assert matching_inodes(listeners, "127.0.0.2", 6443) == []
    # 0.0.0.0:22 takes connections for every address, and binding the wildcard collides with every listener.
    assert matching_inodes(listeners, "192.0.2.1", 22) == [17]
    assert matching_inodes(listeners, "0.0.0.0", 6443) == [4242]


def test_in_use_message_names_the_owner_and_the_fix() -> None:
    from pykubevirt.cli.port_owner import PortOwner

    assert in_use_message("127.0.0.1", 6443, PortOwner(12, "nginx")) == (
        "127.0.0.1:6443 is in use (pid 12, nginx); pass --listen HOST:PORT or stop it"
    )
    assert in_use_message("::1", 6443, None) == "[::1]:6443 is in use; pass --listen HOST:PORT or stop it"


def test_a_bound_socket_is_found_with_its_process() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        owner = port_owner("127.0.0.1", port)
        assert owner is not None
        assert owner.pid == os.getpid()
        assert owner.name == open(f"/proc/{os.getpid()}/comm").read().strip()
    assert not port_in_use("127.0.0.1", port)
    assert port_owner("127.0.0.1", port) is None
