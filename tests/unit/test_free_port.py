"""The test support's free ports: below the ephemeral range, one slice per pytest-xdist worker."""

from __future__ import annotations

import socket

from tests.support.ports import ephemeral_low, free_port, port_slice


def test_workers_draw_from_disjoint_slices_below_the_ephemeral_range() -> None:
    slices = [port_slice(worker, 2, 20000, 32768) for worker in ("gw0", "gw1", "")]
    assert [(s.start, s.stop) for s in slices] == [(20000, 24256), (24256, 28512), (28512, 32768)]
    assert port_slice("gw0", 1, 20000, 32768) != port_slice("", 1, 20000, 32768)


def test_a_free_port_binds_and_is_not_one_the_kernel_gives_outgoing_connections() -> None:
    port = free_port()
    if ephemeral_low() > 21000:  # else the host's ephemeral range leaves no room below it
        assert 20000 <= port < ephemeral_low()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
