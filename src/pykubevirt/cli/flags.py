"""Argument types shared by commands: argparse turns a bad value into a usage error instead of a traceback."""

from __future__ import annotations

import argparse


def listen_address(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port)."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def feature_gates(value: str) -> frozenset[str]:
    """A comma-separated list of KubeVirt feature gates."""
    return frozenset(gate.strip() for gate in value.split(",") if gate.strip())
