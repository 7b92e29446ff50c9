"""One pod's sandbox network on this node: the network part of the kubelet's RunPodSandbox and StopPodSandbox.

Set up (the default network, then the secondary ones, `multus_pod`) before any of the pod's containers starts, and
torn down (CNI DEL and the namespace) once nothing of the pod runs. Its IPs go into the pod's status; a failure
becomes an event (once per message), a retry, and a sandbox that is not ready.
"""

from __future__ import annotations

import logging

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.resources import NODES
from pykubevirt.log import object_fields
from pykubevirt.node import multus_pod
from pykubevirt.node.netns import NetworkError
from pykubevirt.node.pod_network import NetworkNotReady, PodNetwork, node_pod_cidrs

# Logged as the pod worker that runs the pod, whose part of the node agent this is.
log = logging.getLogger("pykubevirt.node.pod_worker")


class SandboxNetwork:
    """The network of the pod `uid`; without a pod network (`network` None) every pod runs in the node's."""

    def __init__(
        self, client: KubeClient, node_name: str, network: PodNetwork | None, recorder: EventRecorder, uid: str
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.network = network
        self.recorder = recorder
        self.uid = uid
        # The pod's IPs once its sandbox network is up (None until then, or for ever without a pod network).
        self.pod_ips: list[str] | None = network.recorded_ips(uid) if network is not None else None
        self.host_network = False
        # Why the last set-up failed; empty once one succeeded.
        self.problem = ""

    async def ensure(self, pod: Object) -> bool:
        """The pod's sandbox network, before any container starts (the kubelet's RunPodSandbox); False: not yet."""
        network = self.network
        if network is None or self.host_network or self.pod_ips is not None:
            return True
        try:
            if not network.pod_cidr:
                node = await self.client.get(NODES, self.node_name)
                cidr = node_pod_cidrs(node)
                if cidr:
                    network.set_pod_cidr(cidr)
            ips, attached = await multus_pod.setup(self.client, network, pod)
            for added in attached:
                addresses = ", ".join(added.ips)
                self.recorder.event(
                    pod, NORMAL, "AddedInterface", f"Add {added.ifname} [{addresses}] from {added.network}"
                )
            self.pod_ips = ips
        except (NetworkNotReady, NetworkError, OSError) as exc:
            message = str(exc)
            if message != self.problem:
                reason = "NetworkNotReady" if isinstance(exc, NetworkNotReady) else "FailedCreatePodSandBox"
                self.recorder.event(pod, WARNING, reason, f"Failed to create pod sandbox: {message}")
                log.warning("pod sandbox network: %s", message, extra=object_fields(pod, node=self.node_name))
            self.problem = message
            return False
        self.problem = ""
        return True

    def netns(self) -> str | None:
        """The network namespace the pod's processes run in (None: the node's)."""
        if self.network is None or self.pod_ips is None:
            return None
        return self.network.netns_of(self.uid)

    async def teardown(self) -> None:
        """CNI DEL and the namespace, once nothing of the pod runs (the kubelet's StopPodSandbox)."""
        if self.network is not None:
            await self.network.teardown(self.uid)
            self.pod_ips = None

    def reported_ips(self) -> list[str] | None:
        """The pod's IPs for its status: None without a pod network or in the host's, else what it has so far."""
        if self.network is None or self.host_network:
            return None
        return self.pod_ips or []
