"""`pykubevirt virt-api`: the subresource API (aggregated APIService) and admission webhooks for a real cluster."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

SERVICE_NAMES = ("virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.cli.apiserver_command import parse_listen
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_config
    from pykubevirt.virtapi.cluster import ClusterOptions, publish_ca_bundle
    from pykubevirt.virtapi.cluster import serve as serve_cluster

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    host, port = parse_listen(args.listen)
    client = KubeClient(config, qps=args.qps, burst=args.burst, user_agent="virt-api")
    try:
        if args.tls_cert_file and args.tls_key_file:
            cert, key = Path(args.tls_cert_file), Path(args.tls_key_file)
        else:
            from pykubevirt.apiserver.security import ensure_pki

            # A CA of our own, published into the APIServices and webhook configurations that name this service.
            pki = ensure_pki(Path(args.data_dir), [*SERVICE_NAMES, f"virt-api.{args.namespace}.svc"])
            cert, key = pki.cert_path, pki.key_path
            if args.publish_ca_bundle:
                await publish_ca_bundle(client, pki.ca_pem)
        options = ClusterOptions(
            host=host,
            port=port,
            cert_file=cert,
            key_file=key,
            feature_gates=frozenset(g.strip() for g in args.feature_gates.split(",") if g.strip()),
            handler_ca_file=Path(args.handler_ca_file) if args.handler_ca_file else None,
            authorize=not args.no_authorization,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_cluster(client, options, stop)
    finally:
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log

    log.configure("virt-api")
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-api", help="run virt-api: the subresource API and admission webhooks (cluster mode)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT to serve HTTPS on")
    parser.add_argument("--namespace", default="kubevirt", help="namespace of the virt-api Service")
    parser.add_argument("--tls-cert-file", default="", help="serving certificate (default: one of our own CA)")
    parser.add_argument("--tls-key-file", default="", help="key of --tls-cert-file")
    parser.add_argument("--data-dir", default="/var/run/kubevirt/virt-api", help="where a generated CA is kept")
    parser.add_argument(
        "--no-publish-ca-bundle",
        dest="publish_ca_bundle",
        action="store_false",
        help="do not write the generated CA into the APIServices and webhook configurations",
    )
    parser.add_argument("--handler-ca-file", default="", help="CA of virt-handlers that serve https")
    parser.add_argument(
        "--no-authorization",
        action="store_true",
        help="skip the requestheader certificate and SubjectAccessReview checks (tests only)",
    )
    parser.add_argument("--feature-gates", default="", help="comma-separated KubeVirt feature gates to enable")
    parser.add_argument("--qps", type=float, default=200.0)
    parser.add_argument("--burst", type=int, default=400)
    parser.set_defaults(func=run)
