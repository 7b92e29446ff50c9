"""`pykubevirt virt-api`: the subresource API (aggregated APIService) and admission webhooks for a real cluster."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pykubevirt.cli.component_client import add_client_flags, connect, set_on_signals
from pykubevirt.cli.flags import feature_gates, listen_address

SERVICE_NAMES = ("virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local")


async def serve(args: argparse.Namespace) -> int:
    from pykubevirt.virtapi.cluster import ClusterOptions, publish_ca_bundle
    from pykubevirt.virtapi.cluster import serve as serve_cluster

    host, port = args.listen
    client = connect(args, "virt-api")
    if client is None:
        return 1
    try:
        serving = None
        if args.certificates_dir:
            from pykubevirt.virtapi.serving_certificates import POLL_SECONDS, ServingFiles

            # The pair virt-controller's leader issues for the Service: the same for every replica.
            files = ServingFiles(Path(args.certificates_dir))
            serving = files.watch()
            ca_pem = await serving.wait(POLL_SECONDS, "the serving certificate")
            cert, key = files.cert_file, files.key_file
            if args.publish_ca_bundle:
                await publish_ca_bundle(client, ca_pem)
        elif args.tls_cert_file and args.tls_key_file:
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
            feature_gates=args.feature_gates,
            handler_ca_file=Path(args.handler_ca_file) if args.handler_ca_file else None,
            handler_certificates_dir=Path(args.handler_certificates_dir) if args.handler_certificates_dir else None,
            authorize=not args.no_authorization,
            serving=serving,
            publish_ca_bundle=args.publish_ca_bundle,
        )
        stop = asyncio.Event()
        set_on_signals(stop)
        await serve_cluster(client, options, stop)
    finally:
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log
    from pykubevirt.cli.garbage_collection import pace_garbage_collection

    log.configure("virt-api")
    pace_garbage_collection()
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("virt-api", help="run virt-api: the subresource API and admission webhooks (cluster mode)")
    add_client_flags(parser, qps=200.0, burst=400)
    parser.add_argument("--listen", type=listen_address, default="0.0.0.0:8443", help="HOST:PORT to serve HTTPS on")
    parser.add_argument("--namespace", default="kubevirt", help="namespace of the virt-api Service")
    parser.add_argument("--tls-cert-file", default="", help="serving certificate (default: one of our own CA)")
    parser.add_argument("--tls-key-file", default="", help="key of --tls-cert-file")
    parser.add_argument(
        "--certificates-dir",
        default="",
        help="serve ca.crt's tls.crt/tls.key from here (the Secret kubevirt-virt-api-certs), waiting until they are "
        "there, publishing ca.crt and loading a renewed pair in place; several replicas can share it",
    )
    parser.add_argument("--data-dir", default="/var/run/kubevirt/virt-api", help="where a generated CA is kept")
    parser.add_argument(
        "--no-publish-ca-bundle",
        dest="publish_ca_bundle",
        action="store_false",
        help="do not write the generated CA into the APIServices and webhook configurations",
    )
    parser.add_argument("--handler-ca-file", default="", help="CA of virt-handlers that serve https")
    parser.add_argument(
        "--handler-certificates-dir",
        default="",
        help="the handlers' CA and client certificate (ca.crt, client.crt, client.key) for their mutual-TLS API, "
        "read again as they change",
    )
    parser.add_argument(
        "--no-authorization",
        action="store_true",
        help="skip the requestheader certificate and SubjectAccessReview checks (tests only)",
    )
    parser.add_argument(
        "--feature-gates", type=feature_gates, default="", help="comma-separated KubeVirt feature gates to enable"
    )
    parser.set_defaults(func=run)
