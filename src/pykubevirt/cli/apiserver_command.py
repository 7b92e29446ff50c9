"""`pykubevirt apiserver`: run the embedded Kubernetes-compatible API server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import errno
from pathlib import Path

from pykubevirt import log
from pykubevirt.apiserver.server import EmbeddedAPIServer, Extension, ServerOptions
from pykubevirt.cli.component_client import set_on_signals
from pykubevirt.cli.garbage_collection import pace_garbage_collection
from pykubevirt.cli.port_owner import in_use_message, port_owner
from pykubevirt.cli.startup_error import StartupError
from pykubevirt.config.cluster_config import ClusterConfig


def extensions(config: ClusterConfig, *, plain: bool) -> list[Extension]:
    """KubeVirt in-process, or (`--plain`) nothing but what kube-apiserver has: virtapi is not even imported."""
    if plain:
        from pykubevirt.apiserver import plain as plain_mode

        return [plain_mode.extension()]
    from pykubevirt.virtapi import embedded

    return [embedded.extension(config)]


async def serve(options: ServerOptions, config: ClusterConfig, *, plain: bool = False) -> None:
    server = EmbeddedAPIServer(options, extensions=extensions(config, plain=plain))
    try:
        await server.start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        await server.stop()
        owner = port_owner(options.host, options.port)
        raise StartupError(in_use_message(options.host, options.port, owner)) from None
    print(f"pykubevirt API server listening on {server.url}", flush=True)
    print(f"export KUBECONFIG={server.kubeconfig_path}", flush=True)
    stop = asyncio.Event()
    set_on_signals(stop)
    await stop.wait()
    await server.stop()


def run(args: argparse.Namespace) -> int:
    log.configure("virt-apiserver")
    pace_garbage_collection()
    host, port = args.listen
    options = ServerOptions(
        data_dir=Path(args.data_dir),
        host=host,
        port=port,
        history_revisions=args.history_revisions,
        compact_interval_seconds=args.compact_interval,
        event_ttl_seconds=args.event_ttl,
        fsync=not args.unsafe_no_fsync,
        service_cidr=args.service_cluster_ip_range,
        terminated_pod_gc_threshold=args.terminated_pod_gc_threshold,
        pod_gc_period_seconds=args.pod_gc_period,
        pod_gc_quarantine_seconds=args.pod_gc_quarantine,
    )
    asyncio.run(serve(options, ClusterConfig(feature_gates=args.feature_gates), plain=args.plain))
    return 0
