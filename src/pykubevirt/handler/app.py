"""virt-handler: the node's VMI agent — heartbeat, and the VMI sync loop for VMIs on this node."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient
from pykubevirt.client.controller import Controller, run_until_failure
from pykubevirt.client.delegated_auth import DelegatedAuth
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import EventHandler, Informer, object_key
from pykubevirt.client.resources import KUBEVIRTS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import ConfigFromKubeVirt
from pykubevirt.handler.api_server import HandlerAPI
from pykubevirt.handler.certificates import HandlerCertificates, MigrationTLS, api_server_context, certificates_watch
from pykubevirt.handler.heartbeat import HEARTBEAT_INTERVAL_SECONDS, heartbeat_loop
from pykubevirt.handler.ksm import DEFAULT_KSM_DIR, KsmHandler
from pykubevirt.handler.migration_target import MigrationTargetReconciler
from pykubevirt.handler.records import NodeRecords
from pykubevirt.handler.vmi_reconciler import VMIReconciler
from pykubevirt.log import set_verbosity

log = logging.getLogger("pykubevirt.handler")

# How often the certificates directory is looked at (a few stat calls): the kubelet fills and updates a Secret volume
# within about a minute, and the API should listen soon after.
CERTIFICATES_POLL_SECONDS = 2.0


@dataclass(slots=True)
class HandlerOptions:
    node: str
    pods_dir: Path
    state_dir: Path
    workers: int = 10
    heartbeat_interval: float = HEARTBEAT_INTERVAL_SECONDS
    resync_seconds: float = 30.0
    api_port: int = 0
    # The Node's InternalIP: the handler's API and the migration proxies listen there.
    node_ip: str = "127.0.0.1"
    # The handler's certificates for the migration proxies' TLS (handler/certificates.py); created there when asked.
    certificates_dir: str = ""
    create_certificates: bool = False
    # Serve the API over TLS with the server certificate of certificates_dir, the VMI paths taking only the
    # handlers' client certificate; it waits for the certificates, which may come later (a Secret volume).
    mutual_tls: bool = False
    # The kernel's KSM knobs (handler/ksm.py); None runs no KSM handling.
    ksm_dir: Path | None = DEFAULT_KSM_DIR


class VirtHandler:
    """Everything virt-handler runs for one node."""

    def __init__(self, client: KubeClient, options: HandlerOptions) -> None:
        self.client = client
        self.options = options
        # VMIs handed over to this node carry its name in a label (set at Scheduled).
        self.vmis = Informer(client, VIRTUAL_MACHINE_INSTANCES, label_selector=f"{c.NODE_NAME_LABEL}={options.node}")
        self.records = NodeRecords(options.state_dir / "vmis.json")
        self.recorder = EventRecorder(client, "virt-handler", host=options.node)
        self.certificates = certificates_watch(options.certificates_dir, create=options.create_certificates)
        if self.certificates.current() is None:
            log.warning("virt-handler has no migration certificates (yet): only migrations with disableTLS can run")
        self.reconciler = VMIReconciler(
            client,
            node=options.node,
            pods_dir=options.pods_dir,
            vmis=self.vmis,
            recorder=self.recorder,
            records=self.records,
            enqueue=self._enqueue,
            migration_tls=self.certificates,
        )
        self.api = HandlerAPI(
            node=options.node,
            pods_dir=options.pods_dir,
            vmis=self.vmis,
            host=options.node_ip,
            metrics_auth=DelegatedAuth(client),
        )
        self.controller = Controller("virt-handler", self.reconciler, workers=options.workers)
        # Set when the API starts listening late (over TLS, once its certificates are there): beat at once.
        self._address_changed = asyncio.Event()
        # VMIs migrating here carry the node's name in another label until they arrive (KubeVirt's target informer).
        self.incoming = Informer(
            client, VIRTUAL_MACHINE_INSTANCES, label_selector=f"{c.MIGRATION_TARGET_NODE_NAME_LABEL}={options.node}"
        )
        self.migration_target = MigrationTargetReconciler(
            client,
            node=options.node,
            pods_dir=options.pods_dir,
            vmis=self.incoming,
            recorder=self.recorder,
            address=options.node_ip,
            enqueue=lambda key: self.target_controller.queue.add(key),
            tls=self.certificates,
        )
        self.target_controller = Controller("virt-handler-migration-target", self.migration_target, workers=2)
        self.target_controller.watch(self.incoming)
        self.controller.watch(self.vmis)
        # A VMI that leaves the selection (deleted, or moved) still needs its guest looked after.
        self.vmis.add_handler(EventHandler(on_delete=lambda vmi: self._enqueue(object_key(vmi), 0)))
        # The KubeVirt object: its logVerbosity (virtHandler, or this node's nodeVerbosity) sets this process's level,
        # and its ksmConfiguration whether this node runs KSM.
        self.kubevirts = Informer(client, KUBEVIRTS)
        self._config = ConfigFromKubeVirt(ClusterConfig())
        follow = self._follow_config
        self.kubevirts.add_handler(EventHandler(on_add=follow, on_update=follow, on_delete=follow))
        self.ksm = (
            KsmHandler(client, options.node, lambda: self._config(self.kubevirts.items()), options.ksm_dir)
            if options.ksm_dir is not None
            else None
        )

    def _follow_config(self, *_: Any) -> None:
        set_verbosity(self._config(self.kubevirts.items()).verbosity("virtHandler", self.options.node))
        if self.ksm is not None:
            self.ksm.changed()

    async def _run_ksm(self) -> None:
        # Not before the configuration is known: a node whose KSM this handler runs would have it stopped meanwhile.
        await self.kubevirts.synced.wait()
        if self.ksm is not None:
            await self.ksm.run()

    def _enqueue(self, key: str, delay: float) -> None:
        if delay > 0:
            self.controller.queue.add_after(key, delay)
        else:
            self.controller.queue.add(key)

    async def _resync(self) -> None:
        """Look at every VMI and every remembered guest periodically, in case an event was missed."""
        await self.vmis.synced.wait()
        while True:
            for key in {*self.vmis.keys(), *self.records.keys()}:
                self._enqueue(key, 0)
            await asyncio.sleep(self.options.resync_seconds)

    async def _serve_api_over_tls(self, poll: float = CERTIFICATES_POLL_SECONDS) -> None:
        """Listen once the certificates are there, and load them again into the listening context as they change."""
        certs = HandlerCertificates(Path(self.options.certificates_dir))
        loaded = await self.certificates.wait(poll, "the certificates of the API")
        context = api_server_context(certs)
        await self.api.start(self.options.api_port, context)
        log.info("virt-handler API serving TLS on %s:%d", self.api.host, self.api.port, extra=self._fields())
        # Publish the address now rather than at the next beat.
        self._address_changed.set()

        async def reload(*_: MigrationTLS) -> bool:
            try:
                api_server_context(certs, into=context)
            except (OSError, ssl.SSLError) as exc:
                # Changed again since the watch read them (a volume mid-update): the listening socket keeps the
                # certificates it had until the next poll.
                log.warning("cannot reload the API's certificates: %s", exc, extra=self._fields())
                return False
            log.info("virt-handler certificates reloaded", extra=self._fields())
            return True

        await self.certificates.follow(poll, loaded, reload)

    def _fields(self) -> dict[str, str]:
        return {"node": self.options.node}

    async def run(self) -> None:
        log.info("virt-handler starting on node %s", self.options.node, extra={"node": self.options.node})
        tls_api = []
        if self.options.mutual_tls:
            tls_api.append(asyncio.create_task(self._serve_api_over_tls(), name="tls-api"))
        else:
            await self.api.start(self.options.api_port)
        tasks = [
            *tls_api,
            asyncio.create_task(self.vmis.run(), name="vmi-informer"),
            asyncio.create_task(self.controller.run(), name="vmi-sync"),
            asyncio.create_task(self.incoming.run(), name="incoming-vmi-informer"),
            asyncio.create_task(self.kubevirts.run(), name="kubevirt-informer"),
            asyncio.create_task(self.target_controller.run(), name="migration-target"),
            asyncio.create_task(
                heartbeat_loop(
                    self.client,
                    self.options.node,
                    self.options.heartbeat_interval,
                    annotations=self.api.annotations,
                    wake=self._address_changed,
                )
            ),
            asyncio.create_task(self._resync()),
            asyncio.create_task(self._run_ksm(), name="ksm"),
        ]
        try:
            await run_until_failure(tasks)
        finally:
            await self.api.stop()
            await self.recorder.flush()
