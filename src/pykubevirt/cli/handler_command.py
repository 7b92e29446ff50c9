"""`pykubevirt virt-handler`: run virt-handler for one node until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

from pykubevirt.cli.component_client import add_client_flags, cancel_on_signals, connect
from pykubevirt.cli.node_addresses import DEFAULT_NODE_IP, add_node_ip_flag, is_loopback


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.handler.app import HandlerOptions, VirtHandler

    if args.mutual_tls and not args.certificates_dir:
        print("error: --mutual-tls needs --certificates-dir", flush=True)
        return 1
    if not is_loopback(args.node_ip) and not args.mutual_tls:
        # Its endpoints are open on loopback; elsewhere only over mutual TLS.
        print(
            f"error: --node-ip {args.node_ip} is not a loopback address: "
            "virt-handler serves other addresses only with --mutual-tls",
            flush=True,
        )
        return 1
    client = connect(args, "virt-handler")
    if client is None:
        return 1
    data_dir = Path(args.data_dir)
    options = HandlerOptions(
        node=args.node_name,
        pods_dir=Path(args.pods_dir) if args.pods_dir else data_dir / "pods",
        state_dir=data_dir / "virt-handler",
        workers=args.workers,
        node_ip=args.node_ip,
        certificates_dir=args.certificates_dir,
        create_certificates=args.create_certificates,
        mutual_tls=args.mutual_tls,
        api_port=args.api_port,
        ksm_dir=Path(args.ksm_dir) if args.ksm_dir else None,
    )
    handler = VirtHandler(client, options)
    task = asyncio.create_task(handler.run())
    cancel_on_signals(task)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log
    from pykubevirt.cli.garbage_collection import pace_garbage_collection

    log.configure("virt-handler")
    pace_garbage_collection()
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-handler", help="run virt-handler, the VMI agent of one node")
    parser.add_argument("--node-name", required=True, help="the node this handler serves")
    add_client_flags(parser, qps=200.0, burst=400)
    parser.add_argument("--data-dir", default="/var/lib/pykubevirt/node", help="the node agent's data directory")
    parser.add_argument("--pods-dir", default="", help="where pod volumes live (default: DATA_DIR/pods)")
    parser.add_argument("--workers", type=int, default=10)
    add_node_ip_flag(
        parser,
        loopback_only=False,
        help="the address its API and migration proxies listen on: a loopback address, or with --mutual-tls the "
        f"pod's IP (default {DEFAULT_NODE_IP})",
    )
    parser.add_argument("--api-port", type=int, default=0, help="the API's port (KubeVirt: 8186; default: any free)")
    parser.add_argument(
        "--mutual-tls",
        action="store_true",
        help="serve the API over TLS with --certificates-dir's server certificate, its VMI paths taking only the "
        "handlers' client certificate (virt-api's too); it listens once the certificates are there",
    )
    parser.add_argument(
        "--certificates-dir",
        default="",
        help="the handlers' CA (ca.crt) and certificates (client.crt/.key, server.crt/.key) for migration TLS",
    )
    parser.add_argument(
        "--create-certificates",
        action="store_true",
        help="create the CA and certificates in --certificates-dir where missing (the embedded cluster)",
    )
    parser.add_argument(
        "--ksm-dir",
        default="/sys/kernel/mm/ksm",
        help="the kernel's KSM knobs, tuned where the KubeVirt CR's ksmConfiguration selects the node ('' for none)",
    )
    parser.set_defaults(func=run)
