"""`pykubevirt scheduler`: the embedded kube-scheduler and node lifecycle loop, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

from pykubevirt.cli.component_client import add_client_flags, cancel_on_signals, connect

logger = logging.getLogger("pykubevirt.node.scheduler")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.node.node_lifecycle import NodeLifecycle
    from pykubevirt.node.scheduler import Scheduler

    client = connect(args, "pykubevirt-scheduler")
    if client is None:
        return 1
    scheduler = Scheduler(client, retry_interval=args.retry_interval)
    lifecycle = NodeLifecycle(client, node_monitor_grace=args.node_monitor_grace)
    task = asyncio.gather(scheduler.run(), lifecycle.run())
    cancel_on_signals(task)
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
    from pykubevirt.cli.garbage_collection import pace_garbage_collection

    log.configure("scheduler")
    pace_garbage_collection()
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("scheduler", help="run the embedded scheduler and node lifecycle controller")
    add_client_flags(parser, qps=200.0, burst=400)
    parser.add_argument(
        "--node-monitor-grace",
        type=float,
        default=40.0,
        help="seconds without a node heartbeat before the node is marked Ready=Unknown and tainted unreachable",
    )
    parser.add_argument(
        "--retry-interval", type=float, default=10.0, help="seconds between attempts to place an unschedulable pod"
    )
    parser.set_defaults(func=run)
