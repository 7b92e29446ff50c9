"""Where an embedded cluster keeps its state, and the command line of each of its components.

`pykubevirt up` supervises these components; tests and benchmarks start the same commands, so what they measure is
what users run.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.cli.node_addresses import node_ip
from pykubevirt.node.pod_network import ClusterNetwork

# PYKUBEVIRT_DATA_DIR and PYKUBEVIRT_LISTEN change the defaults of every command (a second cluster, tests).
DEFAULT_DATA_DIR = Path(os.environ.get("PYKUBEVIRT_DATA_DIR") or "/var/lib/pykubevirt")
DEFAULT_LISTEN = os.environ.get("PYKUBEVIRT_LISTEN") or "127.0.0.1:6443"
DEFAULT_IMAGES_DIR = DEFAULT_DATA_DIR / "images"
_NODE_DIR_NAME = re.compile(r"node(\d+)")


def node_number(name: str) -> int:
    """nodeNN's NN."""
    return int(name.removeprefix("node"))


def recorded_nodes(data_dir: Path) -> list[str]:
    """The nodes this data dir has run (a directory each under nodes/), in order."""
    try:
        found = [p.name for p in (data_dir / "nodes").iterdir() if p.is_dir() and _NODE_DIR_NAME.fullmatch(p.name)]
    except OSError:
        return []
    return sorted(found, key=node_number)


def node_count_file(data_dir: Path) -> Path:
    """Where the supervisor notes how many nodes it runs; kept after `down`, for the next `up`."""
    return data_dir / "run" / "node-count"


def recorded_node_count(data_dir: Path) -> int:
    """How many nodes `up` starts when not told: as many as the data dir last ran, at least one (a data dir from
    before the count was noted: up to its highest node)."""
    try:
        count = int(node_count_file(data_dir).read_text())
    except (OSError, ValueError):
        count = max([0, *map(node_number, recorded_nodes(data_dir))])
    return max(1, count)


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """The mirror pod a component appears as (`kubectl get pods -n kubevirt`, `kubectl logs`)."""

    namespace: str
    name: str
    container: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Component:
    """One supervised process: its name, command line, log file, node, and the pod it appears as (if any)."""

    name: str
    argv: tuple[str, ...]
    log_file: Path
    node: str = ""
    pod: PodIdentity | None = None


def pykubevirt_argv(*args: str) -> tuple[str, ...]:
    """`pykubevirt ARGS` with the interpreter running now (the venv), independent of PATH."""
    return (sys.executable, "-m", "pykubevirt.cli.main", *args)


@dataclass(frozen=True)
class ClusterLayout:
    """The embedded cluster under one data directory."""

    data_dir: Path = DEFAULT_DATA_DIR
    node_count: int = 1
    listen: str = DEFAULT_LISTEN
    # Extra flags per component name (e.g. {"virt-controller": ("--launcher-libvirt-uri", "test:///default")}).
    extra_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The pod network's CIDR (cli/cluster_network.py); empty: pods share the host's network.
    cluster_cidr: str = ""

    @property
    def network_args(self) -> tuple[str, ...]:
        return ("--cluster-cidr", self.cluster_cidr) if self.cluster_cidr else ()

    @property
    def service_args(self) -> tuple[str, ...]:
        """The API server's Service range: the one the host's proxy owns (whatever starts the API server passes it,
        so a ClusterIP is never an address outside this cluster's own network)."""
        if not self.cluster_cidr:
            return ()
        return ("--service-cluster-ip-range", ClusterNetwork(self.cluster_cidr).service_cidr)

    @property
    def apiserver_dir(self) -> Path:
        return self.data_dir / "apiserver"

    @property
    def kubeconfig(self) -> Path:
        return self.apiserver_dir / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.apiserver_dir / f"{component}.kubeconfig"

    def node_kubeconfig(self, node: str) -> Path:
        """The node agent's credentials: user system:node:<node> in system:nodes, as a kubelet's."""
        return self.apiserver_dir / f"node-{node}.kubeconfig"

    @property
    def handler_certificates_dir(self) -> Path:
        """The KubeVirt CA and the virt-handlers' certificates (migration TLS), shared by all nodes' handlers."""
        return self.data_dir / "kubevirt-pki"

    @property
    def images_dir(self) -> Path:
        return self.data_dir / "images"

    @property
    def storage_dir(self) -> Path:
        """Where the local-path provisioner keeps volumes: `<node>/<pv>_<namespace>_<claim>` and `shared/…`."""
        return self.data_dir / "storage"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    @property
    def controller_metrics_file(self) -> Path:
        """Where virt-controller writes the HOST:PORT of its /metrics endpoint."""
        return self.run_dir / "virt-controller-metrics"

    @property
    def webconsole_address_file(self) -> Path:
        """Where the web console writes the HOST:PORT it serves on."""
        return self.run_dir / "webconsole-address"

    @property
    def node_names(self) -> list[str]:
        return [f"node{i:02d}" for i in range(1, self.node_count + 1)]

    def node_dir(self, node: str) -> Path:
        return self.data_dir / "nodes" / node

    @property
    def left_out_nodes(self) -> list[str]:
        """Nodes this data dir has run that this layout does not start (an `up --nodes N` below the last count)."""
        return [name for name in recorded_nodes(self.data_dir) if name not in self.node_names]

    def node_ip(self, node: str) -> str:
        """The node's InternalIP (cli/node_addresses.py): its agent and virt-handler listen there."""
        return node_ip(self.data_dir, self.node_names.index(node) + 1)

    @property
    def control_plane_node(self) -> str:
        """The node the control plane's mirror pods are bound to (the first)."""
        return self.node_names[0]

    def _component(
        self, name: str, *args: str, node: str = "", pod: PodIdentity | None = None, kind: str = ""
    ) -> Component:
        argv = pykubevirt_argv(*args, *self.extra_args.get(kind or name, ()))
        if pod is not None:
            # Written where the node agent serves the mirror pod's log from, so `kubectl logs` reads it.
            host = str(self.node_dir(node or self.control_plane_node))
            log_file = Path(pod_layout.mirror_log_file(host, pod.namespace, pod.name, pod.container))
        else:
            log_file = self.logs_dir / f"{name}.log"
        return Component(name, argv, log_file, node, pod)

    def _pod(self, namespace: str, base: str, node: str, **labels: str) -> PodIdentity:
        return PodIdentity(namespace, f"{base}-{node}", base, tuple(sorted(labels.items())))

    def apiserver(self) -> Component:
        # The embedded API server serves KubeVirt's subresource API too: it is this cluster's virt-api.
        pod = self._pod("kubevirt", "virt-api", self.control_plane_node, **{"kubevirt.io": "virt-api"})
        args = ("apiserver", "--data-dir", str(self.apiserver_dir), "--listen", self.listen, *self.service_args)
        return self._component("apiserver", *args, pod=pod)

    def controller(self) -> Component:
        pod = self._pod("kubevirt", "virt-controller", self.control_plane_node, **{"kubevirt.io": "virt-controller"})
        kubeconfig = str(self.component_kubeconfig("virt-controller"))
        storage = ("--embedded-storage", str(self.storage_dir))
        metrics = ("--metrics-address-file", str(self.controller_metrics_file))
        return self._component(
            "virt-controller",
            *("virt-controller", "--kubeconfig", kubeconfig, *storage, *metrics, *self.network_args),
            pod=pod,
        )

    def scheduler(self) -> Component:
        labels = {"component": "kube-scheduler", "tier": "control-plane"}
        pod = self._pod("kube-system", "kube-scheduler", self.control_plane_node, **labels)
        kubeconfig = str(self.component_kubeconfig("scheduler"))
        return self._component("scheduler", "scheduler", "--kubeconfig", kubeconfig, pod=pod)

    def node_agent(self, node: str) -> Component:
        return self._component(
            f"node-{node}",
            *("node", "--name", node, "--data-dir", str(self.node_dir(node))),
            *("--kubeconfig", str(self.node_kubeconfig(node)), "--images-dir", str(self.images_dir)),
            *("--node-ip", self.node_ip(node)),
            *self.network_args,
            node=node,
            kind="node",
        )

    def handler(self, node: str) -> Component:
        pod = self._pod("kubevirt", "virt-handler", node, **{"kubevirt.io": "virt-handler"})
        return self._component(
            f"virt-handler-{node}",
            *("virt-handler", "--node-name", node, "--data-dir", str(self.node_dir(node))),
            *("--kubeconfig", str(self.component_kubeconfig("virt-handler"))),
            *("--node-ip", self.node_ip(node)),
            *("--certificates-dir", str(self.handler_certificates_dir), "--create-certificates"),
            node=node,
            pod=pod,
            kind="virt-handler",
        )

    def webconsole(self) -> Component:
        """The web console on loopback, a client of the API server like kubectl (users log in with their token)."""
        return self._component(
            "webconsole",
            *("webconsole", "--kubeconfig", str(self.kubeconfig), "--listen", "127.0.0.1:0"),
            *("--address-file", str(self.webconsole_address_file)),
        )

    def components(self) -> list[Component]:
        """Every component, in start order (the API server first: the others need its kubeconfigs)."""
        found = [self.apiserver(), self.controller(), self.scheduler()]
        for node in self.node_names:
            found += [self.node_agent(node), self.handler(node)]
        return [*found, self.webconsole()]
