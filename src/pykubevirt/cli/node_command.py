"""`pykubevirt node`: run the embedded node agent (pods as local processes) until SIGTERM or SIGINT.

Stopping it leaves the pods' processes running; the next agent with the same --name and --data-dir re-adopts them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from pykubevirt.cli.cluster_layout import DEFAULT_IMAGES_DIR
from pykubevirt.cli.component_client import add_client_flags, cancel_on_signals, connect
from pykubevirt.cli.node_addresses import add_node_ip_flag

logger = logging.getLogger("pykubevirt.node")


def _capacity_overrides(args: argparse.Namespace) -> dict[str, str]:
    from pykubevirt.api.quantity import Quantity, QuantityError

    overrides = {"pods": str(args.max_pods)}
    for item in args.capacity_override:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--capacity-override {item!r}: expected RESOURCE=QUANTITY")
        try:
            Quantity.parse(value)
        except QuantityError as exc:
            raise ValueError(f"--capacity-override {item!r}: {exc}") from None
        overrides[name] = value
    return overrides


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.node.agent import DataDirError, NodeAgent
    from pykubevirt.node.cpu_manager import StaticCPUManager, parse_cpu_list
    from pykubevirt.node.image_store import ImageStore
    from pykubevirt.node.pod_network import PodNetwork

    try:
        overrides = _capacity_overrides(args)
    except ValueError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    client = connect(args, f"pykubevirt-node/{args.name}")
    if client is None:
        return 1
    agent = NodeAgent(
        client,
        args.name,
        Path(args.data_dir),
        ImageStore(Path(args.images_dir)),
        args.log_port,
        workers=args.workers,
        heartbeat_interval=args.heartbeat_interval,
        capacity_overrides=overrides,
        cpu_manager=StaticCPUManager(parse_cpu_list(args.reserved_cpus))
        if args.cpu_manager_policy == "static"
        else None,
        network=PodNetwork(args.cluster_cidr, args.name, Path(args.data_dir), pod_cidr=args.pod_cidr)
        if args.cluster_cidr
        else None,
        node_ip=args.node_ip,
        fork_server=args.fork_server,
    )
    task = asyncio.create_task(agent.run())
    cancel_on_signals(task)
    started = asyncio.create_task(agent.started.wait())
    await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
    if agent.started.is_set():
        # Tests and supervisors wait for this line.
        print(f"node {args.name} ready; container logs on http://{args.node_ip}:{agent.log_port}", flush=True)
    started.cancel()
    code = 0
    try:
        await task
    except asyncio.CancelledError:
        logger.info("stopping; pods keep running")
    except DataDirError as exc:
        print(f"error: {exc}", flush=True)
        code = 1
    except Exception:
        logger.exception("node agent failed")
        code = 1
    finally:
        await client.close()
    return code


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log
    from pykubevirt.cli.garbage_collection import pace_garbage_collection

    log.configure("node-agent")
    pace_garbage_collection()
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("node", help="run the embedded node agent: the pods bound to --name as local processes")
    parser.add_argument("--name", required=True, help="the Node's name")
    parser.add_argument("--data-dir", required=True, help="directory for the pods' volumes, logs and state")
    add_client_flags(parser, qps=100.0, burst=200)
    parser.add_argument(
        "--images-dir", default=DEFAULT_IMAGES_DIR, help=f"containerDisk image store (default: {DEFAULT_IMAGES_DIR})"
    )
    parser.add_argument(
        "--log-port",
        type=int,
        default=0,
        help="loopback port of the unauthenticated container-log endpoint (0: any free port)",
    )
    parser.add_argument("--workers", type=int, default=8, help="pods synced in parallel")
    add_node_ip_flag(parser)
    parser.add_argument("--max-pods", type=int, default=110, help="pods this node accepts (kubelet's --max-pods)")
    parser.add_argument(
        "--capacity-override",
        action="append",
        default=[],
        metavar="RESOURCE=QUANTITY",
        help="developer setting: report this capacity instead of the host's (e.g. memory=400Gi for test-driver runs)",
    )
    parser.add_argument(
        "--cpu-manager-policy",
        choices=("none", "static"),
        default="none",
        help="kubelet's: static gives a Guaranteed pod's whole-CPU containers exclusive CPUs, and labels the node "
        "kubevirt.io/cpumanager=true (dedicatedCpuPlacement)",
    )
    parser.add_argument("--reserved-cpus", default="0", help="kubelet's: CPUs never given exclusively (default 0)")
    parser.add_argument("--heartbeat-interval", type=float, default=10.0, help="seconds between Node heartbeats")
    parser.add_argument(
        "--fork-server",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fork pykubevirt's own containers (launchers) from one preloaded Python, sharing its imports; "
        "--no-fork-server starts each in a fresh interpreter",
    )
    parser.add_argument(
        "--cluster-cidr",
        default="",
        help="the cluster's pod CIDR: pods get their own network namespaces through CNI (empty: they share the host's)",
    )
    parser.add_argument(
        "--pod-cidr", default="", help="this node's podCIDR, as the kubelet's flag (default: the Node's spec.podCIDR)"
    )
    parser.set_defaults(func=run)
