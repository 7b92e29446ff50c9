"""`pykubevirt virt-controller`: run virt-controller against an API server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

logger = logging.getLogger("pykubevirt.controller")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.admission.context import ClusterConfig
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_config
    from pykubevirt.controller.app import ControllerOptions, VirtController
    from pykubevirt.controller.launcher_pod import LauncherSettings

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    cluster = ClusterConfig()
    options = ControllerOptions(
        workers=args.workers,
        config=cluster,
        launcher=LauncherSettings(cluster=cluster, libvirt_uri=args.launcher_libvirt_uri),
        heartbeat_timeout=args.heartbeat_timeout,
        leader_election=not args.no_leader_election,
        identity=args.identity,
    )
    client = KubeClient(config, qps=args.qps, burst=args.burst, user_agent="virt-controller")
    controller = VirtController(client, options)
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(controller.run())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    code = 0
    try:
        await task
        # Leadership lost: exit so the supervisor restarts us as a candidate, as KubeVirt's virt-controller does.
        logger.error("leadership lost; exiting")
        code = 1
    except asyncio.CancelledError:
        logger.info("stopping")
    finally:
        with contextlib.suppress(Exception):
            await controller.shutdown()
        await client.close()
    return code


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log

    log.configure("virt-controller")
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-controller", help="run virt-controller (VM, VMI and node controllers)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--workers", type=int, default=10, help="reconcile workers per controller")
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=60.0,
        help="seconds without a virt-handler heartbeat before a node is unresponsive",
    )
    parser.add_argument(
        "--qps", type=float, default=1000.0, help="client-side request rate limit (KubeVirt's virt-controller: 200)"
    )
    parser.add_argument("--burst", type=int, default=2000, help="client-side request burst (KubeVirt: 400)")
    parser.add_argument("--identity", default="", help="leader-election identity (default: host-pid)")
    parser.add_argument(
        "--launcher-libvirt-uri",
        default="",
        help="developer setting: launchers use this libvirt URI (e.g. test:///default) instead of embedded QEMU",
    )
    parser.add_argument(
        "--no-leader-election", action="store_true", help="run the controllers without electing a leader"
    )
    parser.set_defaults(func=run)
