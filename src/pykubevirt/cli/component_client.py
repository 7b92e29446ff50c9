"""What every long-running component command shares: its API-server client flags, the client, and signal handling."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pykubevirt.client.api import KubeClient


def add_client_flags(
    parser: argparse.ArgumentParser, *, qps: float, burst: int, qps_note: str = "", burst_note: str = ""
) -> None:
    """Add --kubeconfig, --qps and --burst; a note (e.g. KubeVirt's own value) is appended to the help."""
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--qps", type=float, default=qps, help=f"client-side request rate limit{qps_note}")
    parser.add_argument("--burst", type=int, default=burst, help=f"client-side request burst{burst_note}")


def connect(args: argparse.Namespace, user_agent: str) -> KubeClient | None:
    """A client for the flags' kubeconfig, or None once the reason it cannot be loaded is printed as one line."""
    # Imported here so that commands which never talk to a server (validate, crds) start fast.
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_config

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return None
    return KubeClient(config, qps=args.qps, burst=args.burst, user_agent=user_agent)


def admin_client(kubeconfig: Path, user_agent: str) -> KubeClient | None:
    """An unthrottled client of the cluster's admin kubeconfig (the supervisor's helpers), None while the API server
    has not written it yet."""
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_kubeconfig

    try:
        return KubeClient(load_kubeconfig(kubeconfig), qps=0, user_agent=user_agent)
    except ConfigError:
        return None


def cancel_on_signals(task: asyncio.Future[Any]) -> None:
    """SIGTERM and SIGINT cancel the component's main task, so its own cleanup runs as it unwinds."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)


def set_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set the event a server waits on to stop."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
