"""Runs what `deploy/` deploys the way a cluster would, against `pykubevirt apiserver --plain`.

Each Deployment's replicas and each DaemonSet's pod (one node) become processes running the container's own
command line, with what a pod gets from the kubelet: its service account's token, the CA and the namespace in a
directory standing in for /var/run/secrets/kubernetes.io/serviceaccount (named by PYKUBEVIRT_SERVICE_ACCOUNT_DIR),
KUBERNETES_SERVICE_HOST/PORT, its env, and host directories for its emptyDir and hostPath volumes and for its
Secret and ConfigMap volumes (plain or projected), which a thread keeps in step with their objects as the kubelet
does, so one made after the pod started reaches it too. Components are authorized by the manifests' own RBAC. The
harness also stands in for the pod network and the endpoint controller: a container port becomes a free loopback port
(its `--listen`-style and `--*-port` arguments rewritten), and a Service selecting a ready pod gets an EndpointSlice
naming that port.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from pykubevirt.client.config import SERVICE_ACCOUNT_DIR_ENV
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.ports import free_port

WORKLOAD_KINDS = ("Deployment", "DaemonSet")
_LISTEN = re.compile(r"^(?P<host>0\.0\.0\.0|\[::\]|::|):(?P<port>\d+)$")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_references(arg: str, defined: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of command and args: the container's env only; `$$` escapes; unknown stay."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return defined.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, arg)


@dataclass
class PodProcess:
    """One pod's container, running as a process."""

    name: str
    namespace: str
    labels: dict[str, str]
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    container: dict[str, Any] = field(default_factory=dict)  # the container of the pod spec it runs
    ports: dict[int, int] = field(default_factory=dict)  # containerPort → loopback port
    named_ports: dict[str, int] = field(default_factory=dict)  # port name → loopback port
    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ClusterMode:
    """The cluster's kubelet and controllers, as far as `deploy/`'s workloads need them, for one API server."""

    def __init__(
        self,
        server: APIServerProcess,
        home: Path,
        work: Path,
        node_name: str = "node-1",
        host_paths: dict[str, Path] | None = None,
    ) -> None:
        self.server = server
        self.home = home
        self.work = work
        self.node_name = node_name
        # hostPath volumes shared with the node's stand-ins (the node agent's pods directory for /var/lib/kubelet/pods);
        # any other hostPath gets a directory of the test, so the host's own paths stay untouched.
        self.host_paths = dict(host_paths or {})
        self.pods: list[PodProcess] = []
        # Secret and ConfigMap volumes: (directory, namespace, its (kind, name) sources), refreshed by one thread.
        self.source_volumes: list[tuple[Path, str, list[tuple[str, str]]]] = []
        self._stop_refresh = threading.Event()
        self._refresher: threading.Thread | None = None
        self._admin_token = ""

    def render(self, directory: Path) -> list[dict[str, Any]]:
        """`kubectl kustomize DIR`: the objects `kubectl apply -k DIR` would apply."""
        rendered = kubectl(self.server, self.home, "kustomize", str(directory)).stdout
        return [doc for doc in yaml.safe_load_all(rendered) if doc]

    def apply(self, directory: Path) -> list[dict[str, Any]]:
        kubectl(self.server, self.home, "apply", "-k", str(directory))
        return self.render(directory)

    # -------------------------------------------------------------------------------------------- pods

    def _service_account_dir(self, pod_dir: Path, namespace: str, account: str) -> Path:
        directory = pod_dir / "serviceaccount"
        directory.mkdir(parents=True, exist_ok=True)
        # A TokenRequest, as the kubelet makes for a pod's projected service-account token.
        token = kubectl(self.server, self.home, "-n", namespace, "create", "token", account).stdout.strip()
        (directory / "token").write_text(token)
        (directory / "ca.crt").write_bytes(self.server.ca_file().read_bytes())
        (directory / "namespace").write_text(namespace)
        return directory

    # -------------------------------------------------------------------------------- secrets and config maps

    def _source(self, namespace: str, kind: str, name: str) -> dict[str, bytes]:
        """A Secret's or ConfigMap's data as files ({} while it does not exist), read with the admin's token."""
        plural = "secrets" if kind == "secret" else "configmaps"
        url = f"https://127.0.0.1:{self.server.port}/api/v1/namespaces/{namespace}/{plural}/{name}"
        if not self._admin_token:
            self._admin_token = self.server.token()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._admin_token}"})
        context = ssl.create_default_context(cafile=str(self.server.ca_file()))
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as reply:
                found = json.load(reply)
        except (urllib.error.URLError, OSError, ValueError):
            return {}
        data = found.get("data") or {}
        if kind == "secret":
            return {key: base64.b64decode(value) for key, value in data.items()}
        return {key: str(value).encode() for key, value in data.items()}

    def _fill_source_volume(self, directory: Path, namespace: str, sources: list[tuple[str, str]]) -> None:
        for kind, name in sources:
            for key, value in self._source(namespace, kind, name).items():
                target = directory / key
                if target.exists() and target.read_bytes() == value:
                    continue
                tmp = directory / f".{key}.tmp"
                tmp.write_bytes(value)
                tmp.replace(target)

    def _refresh_sources(self) -> None:
        while not self._stop_refresh.wait(1.0):
            for directory, namespace, names in list(self.source_volumes):
                self._fill_source_volume(directory, namespace, names)

    def _source_volume(self, pod_dir: Path, namespace: str, volume: dict[str, Any]) -> Path | None:
        if "secret" in volume:
            names = [("secret", volume["secret"]["secretName"])]
        elif "configMap" in volume:
            names = [("configMap", volume["configMap"]["name"])]
        elif "projected" in volume:
            sources = volume["projected"].get("sources") or []
            names = [(kind, s[kind]["name"]) for s in sources for kind in ("secret", "configMap") if kind in s]
        else:
            return None
        directory = pod_dir / "volumes" / volume["name"]
        directory.mkdir(parents=True, exist_ok=True)
        self._fill_source_volume(directory, namespace, names)
        self.source_volumes.append((directory, namespace, names))
        if self._refresher is None:
            self._refresher = threading.Thread(target=self._refresh_sources, name="source-volumes", daemon=True)
            self._refresher.start()
        return directory

    def _volume_dirs(self, pod_dir: Path, spec: dict[str, Any], namespace: str) -> dict[str, Path]:
        dirs = {}
        for volume in spec.get("volumes") or []:
            if (source_dir := self._source_volume(pod_dir, namespace, volume)) is not None:
                dirs[volume["name"]] = source_dir
            elif "emptyDir" in volume or "hostPath" in volume:
                host_path = (volume.get("hostPath") or {}).get("path", "")
                path = self.host_paths.get(host_path) or pod_dir / "volumes" / volume["name"]
                path.mkdir(parents=True, exist_ok=True)
                dirs[volume["name"]] = path
        return dirs

    def _env(self, container: dict[str, Any], pod: PodProcess, sa_dir: Path, pod_dir: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        home = pod_dir / "home"
        home.mkdir(exist_ok=True)
        fields = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "spec.nodeName": self.node_name,
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
            elif "fieldRef" in (entry.get("valueFrom") or {}):
                env[entry["name"]] = fields.get(entry["valueFrom"]["fieldRef"]["fieldPath"], "")
        env.update(
            {
                "HOME": str(home),
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.server.port),
                SERVICE_ACCOUNT_DIR_ENV: str(sa_dir),
            }
        )
        return env

    @staticmethod
    def _rewrite(arg: str, mounts: dict[str, Path], ports: dict[int, int]) -> str:
        """A mount path becomes its host directory; a wildcard listen address a loopback port."""
        flag, eq, value = arg.partition("=")
        target = value if eq else arg
        match = _LISTEN.match(target)
        if match and int(match["port"]) in ports:
            target = f"127.0.0.1:{ports[int(match['port'])]}"
        elif eq and flag.endswith("-port") and target.isdigit() and int(target) in ports:
            target = str(ports[int(target)])
        for mount_path, host in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if target == mount_path or target.startswith(mount_path.rstrip("/") + "/"):
                target = str(host) + target[len(mount_path.rstrip("/")) :]
                break
        return f"{flag}={target}" if eq else target

    def start_workload(
        self, workload: dict[str, Any], replicas: int | None = None, *, wait: bool = True
    ) -> list[PodProcess]:
        """Start a Deployment's replicas (or `replicas`) or a DaemonSet's one pod, each container as a process, and
        (unless not to `wait`: see `wait_ready`) wait for their readiness and give their Services endpoints."""
        meta = workload["metadata"]
        namespace = meta.get("namespace") or "default"
        template = workload["spec"]["template"]
        spec = template["spec"]
        count = 1 if workload["kind"] == "DaemonSet" else int(replicas or workload["spec"].get("replicas", 1))
        started = []
        for index in range(count):
            name = f"{meta['name']}-{index}"
            pod_dir = self.work / namespace / name
            sa_dir = self._service_account_dir(pod_dir, namespace, spec.get("serviceAccountName") or "default")
            volumes = self._volume_dirs(pod_dir, spec, namespace)
            for container in spec["containers"]:
                pod = PodProcess(
                    name,
                    namespace,
                    dict((template.get("metadata") or {}).get("labels") or {}),
                    [],
                    {},
                    pod_dir / f"{container['name']}.log",
                    container,
                )
                for port in container.get("ports") or []:
                    host_port = free_port()
                    pod.ports[int(port["containerPort"])] = host_port
                    if port.get("name"):
                        pod.named_ports[port["name"]] = host_port
                mounts = {
                    m["mountPath"]: volumes[m["name"]]
                    for m in container.get("volumeMounts") or []
                    if m["name"] in volumes
                }
                pod.env = self._env(container, pod, sa_dir, pod_dir)
                defined = {e["name"]: pod.env[e["name"]] for e in container.get("env") or [] if e["name"] in pod.env}
                command = [*container.get("command", []), *container.get("args", [])]
                argv = [self._rewrite(expand_references(a, defined), mounts, pod.ports) for a in command]
                pod.argv = list(pykubevirt_argv(*argv[1:])) if argv[0] == "pykubevirt" else argv
                with pod.log_path.open("ab") as log:
                    pod.process = subprocess.Popen(pod.argv, env=pod.env, stdout=log, stderr=subprocess.STDOUT)
                self.pods.append(pod)
                started.append(pod)
        if wait:
            self.wait_ready(started)
        return started

    def wait_ready(self, pods: list[PodProcess] | None = None) -> None:
        """Wait for the pods' readiness probes (all started pods by default), then publish their endpoints: as on a
        cluster, where all start together and one's readiness may need another (virt-api needs virt-controller's
        certificate)."""
        pods = list(self.pods) if pods is None else pods
        for pod in pods:
            self._wait_ready(pod)
        self._publish_endpoints(pods)

    @staticmethod
    def _wait_ready(pod: PodProcess, timeout: float = 60.0) -> None:
        """Poll the container's readinessProbe (httpGet) as the kubelet does, until it answers 200."""
        probe = (pod.container.get("readinessProbe") or {}).get("httpGet")
        if not probe:
            return
        port = probe["port"]
        host_port = pod.named_ports[port] if isinstance(port, str) else pod.ports[int(port)]
        scheme = str(probe.get("scheme", "HTTP")).lower()
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe certificates either
        url = f"{scheme}://127.0.0.1:{host_port}{probe.get('path', '/')}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert pod.process is not None
            if pod.process.poll() is not None:
                raise RuntimeError(f"{pod.name} exited ({pod.process.returncode}): see {pod.log_path}")
            try:
                with urllib.request.urlopen(url, context=context, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{pod.name} did not become ready: see {pod.log_path}")

    # -------------------------------------------------------------------------------------------- endpoints

    def _publish_endpoints(self, pods: list[PodProcess]) -> None:
        """EndpointSlices for the Services that select these pods, naming their loopback ports."""
        services = json.loads(kubectl(self.server, self.home, "get", "services", "-A", "-o", "json").stdout)["items"]
        slices = []
        for service in services:
            selector = (service.get("spec") or {}).get("selector") or {}
            namespace = service["metadata"]["namespace"]
            chosen = [
                p
                for p in pods
                if p.namespace == namespace and selector and all(p.labels.get(k) == v for k, v in selector.items())
            ]
            if not chosen:
                continue
            ports = []
            for entry in service["spec"].get("ports") or []:
                target = entry.get("targetPort", entry["port"])
                pod = chosen[0]
                host_port = pod.named_ports.get(target) if isinstance(target, str) else pod.ports.get(int(target))
                if host_port is not None:
                    ports.append({"name": entry.get("name", ""), "port": host_port, "protocol": "TCP"})
            slices.append(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": f"{service['metadata']['name']}-harness",
                        "namespace": namespace,
                        "labels": {"kubernetes.io/service-name": service["metadata"]["name"]},
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
                    "ports": ports,
                }
            )
        if slices:
            kubectl(self.server, self.home, "apply", "-f", "-", stdin=yaml.safe_dump_all(slices))

    def stop(self) -> None:
        self._stop_refresh.set()
        if self._refresher is not None:
            self._refresher.join(timeout=10)
        for pod in reversed(self.pods):
            pod.stop()
        self.pods.clear()
