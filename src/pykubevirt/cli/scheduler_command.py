"""`pykubevirt scheduler`: the embedded kube-scheduler and node lifecycle loop, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

logger = logging.getLogger("pykubevirt.node.scheduler")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_config
    from pykubevirt.node.node_lifecycle import NodeLifecycle
    from pykubevirt.node.scheduler import Scheduler

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    client = KubeClient(config, qps=args.qps, burst=args.burst, user_agent="pykubevirt-scheduler")
    scheduler = Scheduler(client, retry_interval=args.retry_interval)
    lifecycle = NodeLifecycle(client, node_monitor_grace=args.node_monitor_grace)
    task = asyncio.gather(scheduler.run(), lifecycle.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    logger.info("scheduler and node lifecycle started")
    try:
        await task
    except asyncio.CancelledError:
        logger.info("stopping")
    finally:
        with contextlib.suppress(Exception):
            await scheduler.recorder.flush()
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log

    log.configure("scheduler")
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("scheduler", help="run the embedded scheduler and node lifecycle controller")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument(
        "--node-monitor-grace",
        type=float,
        default=40.0,
        help="seconds without a node heartbeat before the node is marked Ready=Unknown and tainted unreachable",
    )
    parser.add_argument(
        "--retry-interval", type=float, default=10.0, help="seconds between attempts to place an unschedulable pod"
    )
    parser.add_argument("--qps", type=float, default=200.0, help="client-side request rate limit")
    parser.add_argument("--burst", type=int, default=400, help="client-side request burst")
    parser.set_defaults(func=run)
