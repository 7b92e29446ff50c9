"""`pykubevirt virt-handler`: run virt-handler for one node until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_config
    from pykubevirt.handler.app import HandlerOptions, VirtHandler

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    client = KubeClient(config, qps=args.qps, burst=args.burst, user_agent="virt-handler")
    data_dir = Path(args.data_dir)
    options = HandlerOptions(
        node=args.node_name,
        pods_dir=Path(args.pods_dir) if args.pods_dir else data_dir / "pods",
        state_dir=data_dir / "virt-handler",
        workers=args.workers,
    )
    handler = VirtHandler(client, options)
    task = asyncio.create_task(handler.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log

    log.configure("virt-handler")
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-handler", help="run virt-handler, the VMI agent of one node")
    parser.add_argument("--node-name", required=True, help="the node this handler serves")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--data-dir", default="/var/lib/pykubevirt/node", help="the node agent's data directory")
    parser.add_argument("--pods-dir", default="", help="where pod volumes live (default: DATA_DIR/pods)")
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--qps", type=float, default=200.0)
    parser.add_argument("--burst", type=int, default=400)
    parser.set_defaults(func=run)
