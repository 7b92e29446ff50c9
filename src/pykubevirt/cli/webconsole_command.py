"""`pykubevirt webconsole`: the web console's proxy (started by `up` on loopback; in cluster mode, a Deployment)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from pykubevirt.cli.component_client import set_on_signals
from pykubevirt.cli.flags import listen_address
from pykubevirt.cli.metrics_locations import recorded_address

log = logging.getLogger("pykubevirt.webconsole")


def _ports(host: str, port: int, address_file: Path | None) -> list[int]:
    """Port 0 means any free port, but a restarted console first takes the one it had, so its URL stays valid."""
    if port or address_file is None:
        return [port]
    _, _, previous = recorded_address(address_file).rpartition(":")
    return [int(previous), 0] if previous.isdigit() else [0]


async def serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from pykubevirt.client.config import ConfigError, load_config
    from pykubevirt.webconsole.app import STATIC_DIR, make_app
    from pykubevirt.webconsole.upstream import Upstream, handler_ca_watch, upload_proxy_ssl, upstream_ssl

    try:
        config = load_config(args.kubeconfig)
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    host, port = args.listen
    if not (STATIC_DIR / "dist" / "app.js").exists():
        # The API proxy works without it, the pages do not: say so once rather than serve a blank page silently.
        log.warning("the front-end is not built (%s/dist is missing): run `make setup`", STATIC_DIR)
    address_file = Path(args.address_file) if args.address_file else None
    # A browser that leaves a page drops its watches: cancelling their handlers ends the upstream watches too.
    upload_proxy = args.uploadproxy_url.rstrip("/")
    if upload_proxy and "://" not in upload_proxy:
        upload_proxy = "https://" + upload_proxy
    upstream = Upstream(config.server, upstream_ssl(config))
    upstream.upload_proxy, upstream.upload_context = upload_proxy, upload_proxy_ssl(args.uploadproxy_insecure)
    if args.handler_ca_file:
        upstream.handler_ca = handler_ca_watch(args.handler_ca_file)
    app = make_app(upstream)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=2.0)
    await runner.setup()
    try:
        ports = _ports(host, port, address_file)
        for attempt, candidate in enumerate(ports, 1):
            try:
                await web.TCPSite(runner, host, candidate).start()
                break
            except OSError as exc:
                if attempt == len(ports):
                    print(f"error: cannot serve the web console on {host}:{candidate}: {exc.strerror or exc}")
                    return 1
        bound = runner.addresses[0]
        address = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        if address_file is not None:
            address_file.parent.mkdir(parents=True, exist_ok=True)
            temporary = address_file.with_suffix(".tmp")
            temporary.write_text(address + "\n")
            temporary.replace(address_file)
        log.info("web console on http://%s/ for the API server %s", address, config.server)
        stop = asyncio.Event()
        set_on_signals(stop)
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log as logs

    logs.configure("webconsole")
    return asyncio.run(serve(args))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("webconsole", help="serve the web console: the browser UI and a proxy to the API server")
    parser.add_argument(
        "--kubeconfig", default=None, help="where the API server is (default: $KUBECONFIG or in-cluster)"
    )
    parser.add_argument(
        "--listen", type=listen_address, default="127.0.0.1:0", help="HOST:PORT to serve on (default: loopback)"
    )
    parser.add_argument(
        "--uploadproxy-url",
        default="",
        metavar="URL",
        help="CDI's upload proxy for uploads from the browser (default: the API server's, as virtctl image-upload)",
    )
    parser.add_argument(
        "--uploadproxy-insecure", action="store_true", help="do not check the upload proxy's TLS certificate"
    )
    parser.add_argument("--address-file", default="", metavar="FILE", help="write the HOST:PORT served on here")
    parser.add_argument(
        "--handler-ca-file",
        default="",
        metavar="FILE",
        help="the virt-handlers' CA (the ConfigMap kubevirt-ca's ca-bundle), to verify those serving https before "
        "their metrics are scraped with the user's token",
    )
    parser.set_defaults(func=run)
