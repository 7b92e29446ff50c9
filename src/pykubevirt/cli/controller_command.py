"""`pykubevirt virt-controller`: run virt-controller against an API server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.cli.component_client import add_client_flags, cancel_on_signals, connect

if TYPE_CHECKING:
    from pykubevirt.config.cluster_config import ClusterConfig
    from pykubevirt.controller.launcher_pod import LauncherSettings

logger = logging.getLogger("pykubevirt.controller")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.client.delegated_auth import DelegatedAuth
    from pykubevirt.config.cluster_config import ClusterConfig
    from pykubevirt.controller.app import ControllerOptions, VirtController
    from pykubevirt.controller.metrics_endpoint import MetricsEndpoint

    if not args.leader_elect_lease_duration > args.leader_elect_renew_deadline > args.leader_elect_retry_period:
        # client-go's leaderelection refuses these too: a leader could lose the lease while still renewing it.
        print("error: leader election needs lease duration > renew deadline > retry period", flush=True)
        return 1
    client = connect(args, "virt-controller")
    if client is None:
        return 1
    # The KubeVirt object's configuration is layered over this as virt-controller runs (VirtController.config).
    cluster = ClusterConfig()
    extra = []
    export_links = None
    if args.embedded_storage:
        from pykubevirt.controller.vm_export_controller import ExternalLinks
        from pykubevirt.storage.app import StorageController

        extra.append(StorageController(client, Path(args.embedded_storage)).run)
        # The embedded API server proxies exports: their external links are its address, under its CA.
        export_links = ExternalLinks(
            client.config.server.split("://", 1)[-1].rstrip("/"), client.config.ca_data.decode()
        )
    if args.cluster_cidr:
        from pykubevirt.controller.endpoints_controller import EndpointsController
        from pykubevirt.controller.node_ipam import NodeIpamController
        from pykubevirt.node.pod_network import ClusterNetwork
        from pykubevirt.node.service_proxy import ServiceProxy

        extra.append(NodeIpamController(client, args.cluster_cidr).run)
        # The embedded cluster's kube-controller-manager endpoints controllers and its kube-proxy.
        network = ClusterNetwork(args.cluster_cidr)
        extra.append(EndpointsController(client).run)
        extra.append(ServiceProxy(client, network).run)
    if args.certificates_namespace:
        from pykubevirt.controller.kubevirt_certificates import CertificateIssuer

        extra.append(CertificateIssuer(client, args.certificates_namespace).run)
    options = ControllerOptions(
        workers=args.workers,
        config=cluster,
        launcher=launcher_settings(args, cluster),
        heartbeat_timeout=args.heartbeat_timeout,
        leader_election=not args.no_leader_election,
        identity=args.identity,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        extra=tuple(extra),
        export_links=export_links,
    )
    controller = VirtController(client, options)
    host, _, port = args.metrics_listen.rpartition(":")
    endpoint = MetricsEndpoint(
        controller.metrics,
        host=host or "127.0.0.1",
        port=int(port or 0),
        auth=DelegatedAuth(client),
        leading=controller.leading_with_caches,
    )
    try:
        await endpoint.start(Path(args.metrics_address_file) if args.metrics_address_file else None)
    except OSError as exc:
        logger.error("cannot serve metrics on %s: %s", args.metrics_listen, exc.strerror or exc)
        await client.close()
        return 1
    task = asyncio.create_task(controller.run())
    cancel_on_signals(task)
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
        await endpoint.stop()
        await client.close()
    return code


def launcher_settings(args: argparse.Namespace, cluster: ClusterConfig) -> LauncherSettings:
    """The launcher pods' settings from the developer flags; KubeVirt's defaults otherwise."""
    from dataclasses import replace

    from pykubevirt.controller.launcher_pod import LauncherSettings

    settings = LauncherSettings(cluster=cluster, libvirt_uri=args.launcher_libvirt_uri, ovmf_path=args.ovmf_path)
    if args.launcher_image:
        settings = replace(settings, image=args.launcher_image)
    if args.launcher_qemu_timeout is not None:
        settings = replace(settings, qemu_timeout_seconds=args.launcher_qemu_timeout, qemu_timeout_jitter=0)
    return settings


def go_duration(value: str) -> float:
    """argparse type of a duration flag: seconds from Go's form (`15s`, `500ms`, `1m`) or a bare number of seconds."""
    text = value.strip()
    try:
        seconds = float(text) if re.fullmatch(r"\d+(?:\.\d*)?", text) else parse_go_duration(text)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive duration such as 15s or 500ms")
    return seconds


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log
    from pykubevirt.cli.garbage_collection import pace_garbage_collection

    log.configure("virt-controller")
    pace_garbage_collection()
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-controller", help="run virt-controller (VM, VMI and node controllers)")
    add_client_flags(
        parser, qps=1000.0, burst=2000, qps_note=" (KubeVirt's virt-controller: 200)", burst_note=" (KubeVirt: 400)"
    )
    # ControllerOptions.workers says why 20; not imported here, as building the parser must not load the controller.
    parser.add_argument("--workers", type=int, default=20, help="reconcile workers per controller")
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=60.0,
        help="seconds without a virt-handler heartbeat before a node is unresponsive",
    )
    parser.add_argument("--identity", default="", help="leader-election identity (default: host-pid)")
    parser.add_argument(
        "--launcher-image",
        default="",
        help="the virt-launcher pods' image (default pykubevirt/virt-launcher:VERSION)",
    )
    parser.add_argument(
        "--launcher-libvirt-uri",
        default="",
        help="developer setting: launchers use this libvirt URI (e.g. test:///default) instead of embedded QEMU",
    )
    parser.add_argument(
        "--ovmf-path", default=None, help="where launchers find the OVMF images (default /usr/share/OVMF)"
    )
    parser.add_argument(
        "--launcher-qemu-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="developer setting: a launcher whose guest has not started after SECONDS exits and its VMI fails "
        "(KubeVirt: 240 plus up to 119 at random)",
    )
    parser.add_argument(
        "--embedded-storage",
        default="",
        metavar="DIR",
        help="embedded cluster only: run the PV controller and the local-path provisioner, volumes under DIR",
    )
    parser.add_argument(
        "--cluster-cidr",
        default="",
        help=(
            "allocate each Node a /24 podCIDR from this CIDR (kube-controller-manager's --allocate-node-cidrs); "
            "embedded clusters also get Endpoints and the host's Service proxy (nftables)"
        ),
    )
    parser.add_argument(
        "--certificates-namespace",
        default="",
        metavar="NAMESPACE",
        help="as the leader, keep the virt-handlers' CA and certificates in Secrets of NAMESPACE (virt-operator's "
        "job in KubeVirt): kubevirt-ca, kubevirt-virt-handler-certs and kubevirt-virt-handler-server-certs",
    )
    parser.add_argument(
        "--no-leader-election", action="store_true", help="run the controllers without electing a leader"
    )
    parser.add_argument(
        "--metrics-listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /leader here (KubeVirt: port 8443; default: an ephemeral loopback port)",
    )
    parser.add_argument(
        "--metrics-address-file", default="", metavar="FILE", help="write the metrics endpoint's HOST:PORT here"
    )
    # KubeVirt's (and kube-controller-manager's) leader-election flags and defaults: a leader that stops renewing
    # is replaced after at most the lease duration plus one retry period.
    for flag, default, what in (
        ("lease-duration", 15.0, "how long a candidate waits after the last renewal before taking over"),
        ("renew-deadline", 10.0, "how long the leader keeps trying to renew before it gives up leadership"),
        ("retry-period", 2.0, "how often candidates try to take the lease and the leader renews it"),
    ):
        parser.add_argument(
            f"--leader-elect-{flag}",
            type=go_duration,
            default=default,
            metavar="DURATION",
            help=f"{what} ({default:g}s)",
        )
    parser.set_defaults(func=run)
