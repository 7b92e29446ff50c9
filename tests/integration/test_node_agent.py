"""The embedded node agent against a real API server: pods as processes, status, deletion, re-adoption, logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import BadRequest, NotFound
from pykubevirt.client.resources import (
    CONFIG_MAPS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
)
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.node.agent import DataDirError, NodeAgent
from pykubevirt.node.env import expand
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.log_server import tail_offset
from pykubevirt.node.processes import is_alive as processes_alive
from pykubevirt.node.processes import start_ticks
from tests.support.apiserver_process import KUBECTL, APIServerProcess, kubectl, kubectl_env
from tests.support.control_plane import client_for
from tests.support.node_agent_process import NodeAgentProcess, kill_leftover_pods
from tests.support.waiting import consistently, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

PY = sys.executable
DEMO_IMAGE = "pykubevirt.local/node-agent-demo:1.0"
# A registry address nothing listens on: the real skopeo fails at once, and no test touches a registry.
MISSING_IMAGE = "localhost:1/missing:1.0"
UNPAUSED_GATE = "kubevirt.io/virtual-machine-unpaused"


@dataclass
class Env:
    server: APIServerProcess
    client: KubeClient
    agent: NodeAgent
    root: Path
    images: ImageStore
    namespaces: list[str] = field(default_factory=list)

    @property
    def node(self) -> str:
        return self.agent.name

    async def namespace(self) -> str:
        name = f"na-{uuid.uuid4().hex[:8]}"
        await self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.namespaces.append(name)
        return name

    async def clean_up(self) -> None:
        """Force-delete what the tests left (no agent will finish those pods any more), then their namespaces."""
        for namespace in self.namespaces:
            for pod in (await self.client.list(PODS, namespace))["items"]:
                with contextlib.suppress(NotFound):
                    await self.client.delete(PODS, pod["metadata"]["name"], namespace, grace_period_seconds=0)
            with contextlib.suppress(NotFound):
                await self.client.delete(NAMESPACES, namespace)


AGENT_IP = "127.0.0.5"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def forget_node(client: KubeClient, name: str) -> None:
    """Remove a test's Node, so no scheduler of a later test picks a node nobody runs."""
    with contextlib.suppress(NotFound):
        await client.delete(NODES, name)


def image_store(root: Path) -> ImageStore:
    """A real image store holding DEMO_IMAGE (imported: never pulled)."""
    store = ImageStore(root / "images")
    disk = root / "demo.qcow2"
    disk.write_bytes(b"QFI\xfb" + b"\0" * 508)
    store.import_file(DEMO_IMAGE, disk)
    return store


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    root = tmp_path_factory.mktemp("node-agent")
    client = client_for(apiserver)
    images = image_store(root)
    # An address of its own, as `pykubevirt up` gives each node: the log tests reach the agent at its InternalIP.
    agent = NodeAgent(client, unique("node"), root / "node", images, heartbeat_interval=1.0, node_ip=AGENT_IP)
    await agent.start()
    env = Env(apiserver, client, agent, root, images)
    yield env
    await env.clean_up()
    await agent.stop()
    kill_leftover_pods(root / "node")
    await forget_node(client, agent.name)
    await client.close()


def pod_manifest(name: str, node: str | None, *containers: dict[str, Any], **spec: Any) -> Object:
    body: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), "restartPolicy": "Never", **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def py(name: str, code: str, **extra: Any) -> dict[str, Any]:
    """A container running `code` with this test's Python."""
    return {"name": name, "image": "python:3.11", "command": [PY, "-c", code], **extra}


async def get_pod(client: KubeClient, namespace: str, name: str) -> Object | None:
    try:
        return await client.get(PODS, name, namespace)
    except NotFound:
        return None


async def wait_pod(
    client: KubeClient,
    namespace: str,
    name: str,
    check: Callable[[Object], bool],
    timeout: float = 20.0,  # noqa: ASYNC109
) -> Object:
    async def probe() -> Object | None:
        pod = await get_pod(client, namespace, name)
        return pod if pod is not None and check(pod) else None

    try:
        return await eventually(probe, timeout=timeout)
    except AssertionError:
        pod = await get_pod(client, namespace, name)
        raise AssertionError(f"pod {namespace}/{name} never matched; status: {(pod or {}).get('status')}") from None


async def wait_gone(client: KubeClient, namespace: str, name: str, timeout: float = 20.0) -> None:  # noqa: ASYNC109
    async def probe() -> bool:
        return await get_pod(client, namespace, name) is None

    await eventually(probe, timeout=timeout)


def phase(pod: Object) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def status_of(pod: Object, container: str, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (pod.get("status") or {}).get(key) or []:
        if status["name"] == container:
            return dict(status)
    return {}


def state(pod: Object, container: str, init: bool = False) -> dict[str, Any]:
    return dict(status_of(pod, container, init).get("state") or {})


def condition(pod: Object, kind: str) -> dict[str, Any]:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return {}


def pid_of(pod: Object, container: str) -> int:
    return int(str(status_of(pod, container)["containerID"]).removeprefix("process://"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def log_file(data_dir: Path, pod: Object, container: str) -> Path:
    return data_dir / "pods" / pod["metadata"]["uid"] / "logs" / f"{container}.log"


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
    async def probe() -> bool:
        return check()

    await eventually(probe, timeout=timeout)


async def synced(env: Env, uid: str, times: int) -> None:
    """Have the agent sync the pod `times` more times, one after the other."""
    for _ in range(times):
        env.agent.enqueue(uid)
        await until(lambda: not env.agent.queue.pending(uid))


async def printed_pid(env: Env, pod: Object, container: str) -> int:
    """The pid the container's program printed as its first log line (the program, not its exit recorder)."""
    log = log_file(env.agent.data_dir, pod, container)
    await until(lambda: log.exists() and log.read_text().strip() != "")
    return int(log.read_text().split()[0])


def all_running(pod: Object) -> bool:
    """Running, with every container ready."""
    return phase(pod) == "Running" and all(s["ready"] for s in pod["status"]["containerStatuses"])


async def in_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Blocking calls (kubectl) run in a thread: the agent serving them lives in this event loop."""
    return await asyncio.to_thread(func, *args, **kwargs)


# ------------------------------------------------------------------------------------------------------ node


async def test_node_is_registered_with_host_capacity_and_heartbeats(env: Env) -> None:
    node = await env.client.get(NODES, env.node)
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == env.node
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == "amd64"
    status = node["status"]
    assert status["capacity"]["cpu"] == str(os.cpu_count())
    assert status["capacity"]["memory"].endswith("Ki")
    assert status["capacity"]["pods"] == "110"
    # Huge pages as the kubelet names them, whatever the host has reserved (usually none).
    assert status["capacity"]["hugepages-2Mi"].endswith("Mi")
    for device in ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"):
        assert status["capacity"][device] == "1000"
        assert status["allocatable"][device] == "1000"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert {"type": "InternalIP", "address": AGENT_IP} in status["addresses"]
    assert env.agent.log_server.host == AGENT_IP
    assert {"type": "Hostname", "address": env.node} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == env.agent.log_port
    info = status["nodeInfo"]
    assert info["kubeletVersion"] == "v1.32.0-pykubevirt"
    assert info["containerRuntimeVersion"].startswith("pykubevirt-process://")
    assert (info["operatingSystem"], info["architecture"]) == ("linux", "amd64")
    assert info["kernelVersion"] and info["osImage"]

    async def renewed() -> bool:
        current = await env.client.get(NODES, env.node)
        beat = next(c for c in current["status"]["conditions"] if c["type"] == "Ready")
        return bool(beat["lastHeartbeatTime"] != ready["lastHeartbeatTime"])

    await eventually(renewed, timeout=5)


# ------------------------------------------------------------------------------------------------------ lifecycle


# The containers run until the test, having seen the pod Running, writes /go/go (a hostPath volume).
UNTIL_GO = (
    "import json, os, pathlib, time\n"
    "go = pathlib.Path(json.loads(os.environ['PYKUBEVIRT_MOUNTS'])['/go'], 'go')\n"
    "while not go.exists(): time.sleep(0.05)\n"
)


async def test_pod_runs_then_fails_with_the_exit_codes_of_its_containers(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    go = [{"name": "go", "mountPath": "/go"}]
    body = pod_manifest(
        "exits",
        env.node,
        py("ok", UNTIL_GO, volumeMounts=go),
        py("bad", UNTIL_GO + "raise SystemExit(3)\n", volumeMounts=go),
        volumes=[{"name": "go", "hostPath": {"path": str(tmp_path / "go"), "type": "DirectoryOrCreate"}}],
    )
    await env.client.create(PODS, body, ns)
    running = await wait_pod(env.client, ns, "exits", lambda p: phase(p) == "Running")
    assert state(running, "ok")["running"]["startedAt"]
    assert status_of(running, "ok")["ready"] is True and status_of(running, "ok")["started"] is True
    assert condition(running, "Ready")["status"] == "True"
    assert running["status"]["podIP"] == "127.0.0.1" and running["status"]["hostIP"] == "127.0.0.1"
    assert running["status"]["podIPs"] == [{"ip": "127.0.0.1"}]
    assert running["status"]["startTime"]
    assert running["status"]["qosClass"] == "BestEffort"
    assert status_of(running, "ok")["containerID"].startswith("process://")

    (tmp_path / "go" / "go").write_text("")
    done = await wait_pod(env.client, ns, "exits", lambda p: phase(p) == "Failed")
    ok = state(done, "ok")["terminated"]
    bad = state(done, "bad")["terminated"]
    assert (ok["exitCode"], ok["reason"]) == (0, "Completed")
    assert (bad["exitCode"], bad["reason"]) == (3, "Error")
    assert bad["startedAt"] and bad["finishedAt"]
    assert status_of(done, "bad")["restartCount"] == 0, "restartPolicy Never"
    assert condition(done, "Ready")["reason"] == "PodCompleted"
    assert condition(done, "ContainersReady")["status"] == "False"


async def test_pod_whose_containers_all_succeed_is_succeeded(env: Env) -> None:
    ns = await env.namespace()
    await env.client.create(PODS, pod_manifest("fine", env.node, py("main", "print('done')")), ns)
    done = await wait_pod(env.client, ns, "fine", lambda p: phase(p) == "Succeeded")
    assert state(done, "main")["terminated"]["exitCode"] == 0
    assert log_file(env.agent.data_dir, done, "main").read_text() == "done\n"


async def test_init_containers_run_in_order_and_share_empty_dirs_and_env(env: Env) -> None:
    ns = await env.namespace()
    await env.client.create(
        CONFIG_MAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"colour": "blue"}},
        ns,
    )
    writer = (
        "import json, os, pathlib\n"
        "mounts = json.loads(os.environ['PYKUBEVIRT_MOUNTS'])\n"
        "pathlib.Path(mounts['/shared'], 'note').write_text('from init')\n"
    )
    reader = (
        "import json, os, pathlib\n"
        "mounts = json.loads(os.environ['PYKUBEVIRT_MOUNTS'])\n"
        "print(pathlib.Path(mounts['/in'], 'note').read_text())\n"
        "print(pathlib.Path(mounts['/config'], 'colour').read_text())\n"
        "print(json.dumps({k: os.environ.get(k) for k in "
        "['POD_NAME', 'POD_NAMESPACE', 'POD_UID', 'NODE', 'POD_IP', 'HOST_IP', 'GREETING', 'COLOUR', 'HOSTNAME']}))\n"
        "print(json.dumps(mounts))\n"
    )
    env_vars = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "GREETING", "value": "hello $(POD_NAME)"},
        {"name": "COLOUR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "colour"}}},
    ]
    body = pod_manifest(
        "sharing",
        env.node,
        py(
            "reader",
            reader,
            env=env_vars,
            volumeMounts=[
                {"name": "scratch", "mountPath": "/in"},
                {"name": "config", "mountPath": "/config"},
            ],
        ),
        initContainers=[py("writer", writer, volumeMounts=[{"name": "scratch", "mountPath": "/shared"}])],
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "config", "configMap": {"name": "settings"}}],
    )
    await env.client.create(PODS, body, ns)
    done = await wait_pod(env.client, ns, "sharing", lambda p: phase(p) in ("Succeeded", "Failed"))
    assert phase(done) == "Succeeded", done["status"]
    init = state(done, "writer", init=True)["terminated"]
    assert (init["exitCode"], init["reason"]) == (0, "Completed")
    assert status_of(done, "writer", init=True)["ready"] is True
    assert condition(done, "Initialized")["status"] == "True"
    lines = log_file(env.agent.data_dir, done, "reader").read_text().splitlines()
    assert lines[0] == "from init"
    assert lines[1] == "blue"
    values = json.loads(lines[2])
    assert values == {
        "POD_NAME": "sharing",
        "POD_NAMESPACE": ns,
        "POD_UID": done["metadata"]["uid"],
        "NODE": env.node,
        "POD_IP": "127.0.0.1",
        "HOST_IP": "127.0.0.1",
        "GREETING": "hello sharing",
        "COLOUR": "blue",
        "HOSTNAME": "sharing",
    }
    volumes = env.agent.data_dir / "pods" / done["metadata"]["uid"] / "volumes"
    # The ServiceAccount admission plugin gave each container the account's token volume too.
    token = next(v["name"] for v in done["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    assert json.loads(lines[3]) == {
        "/in": str(volumes / "scratch"),
        "/config": str(volumes / "config"),
        "/var/run/secrets/kubernetes.io/serviceaccount": str(volumes / token),
    }


async def test_restart_policy_on_failure_restarts_a_failed_container(env: Env) -> None:
    ns = await env.namespace()
    flaky = (
        "import json, os, pathlib, sys\n"
        "marker = pathlib.Path(json.loads(os.environ['PYKUBEVIRT_MOUNTS'])['/scratch'], 'tried')\n"
        "if not marker.exists():\n"
        "    marker.write_text('x'); sys.exit(1)\n"
    )
    body = pod_manifest(
        "flaky",
        env.node,
        py("main", flaky, volumeMounts=[{"name": "work", "mountPath": "/scratch"}]),
        restartPolicy="OnFailure",
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    await env.client.create(PODS, body, ns)
    done = await wait_pod(env.client, ns, "flaky", lambda p: phase(p) == "Succeeded")
    status = status_of(done, "main")
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0


async def test_restart_policy_always_backs_off_a_crashing_container(env: Env) -> None:
    ns = await env.namespace()
    await env.client.create(
        PODS, pod_manifest("crashing", env.node, py("main", "import sys; sys.exit(2)"), restartPolicy="Always"), ns
    )

    def backing_off(pod: Object) -> bool:
        return state(pod, "main").get("waiting", {}).get("reason") == "CrashLoopBackOff"

    pod = await wait_pod(env.client, ns, "crashing", backing_off)
    status = status_of(pod, "main")
    assert status["restartCount"] == 1, "the first restart is immediate, the second waits 10 s"
    assert status["lastState"]["terminated"]["exitCode"] == 2
    assert "back-off 10s restarting failed container=main" in status["state"]["waiting"]["message"]
    assert phase(pod) == "Running"
    await env.client.delete(PODS, "crashing", ns)
    await wait_gone(env.client, ns, "crashing")


async def test_commands_and_volumes_that_cannot_work_are_reported_clearly(env: Env) -> None:
    ns = await env.namespace()
    body = pod_manifest(
        "broken",
        env.node,
        {"name": "missing", "image": "x", "command": ["no-such-binary-pykubevirt"]},
        py("claims", "pass", volumeMounts=[{"name": "data", "mountPath": "/data"}]),
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}],
    )
    await env.client.create(PODS, body, ns)

    def reported(pod: Object) -> bool:
        return bool(state(pod, "missing").get("waiting", {}).get("message")) and bool(
            state(pod, "claims").get("waiting", {}).get("message")
        )

    pod = await wait_pod(env.client, ns, "broken", reported)
    missing = state(pod, "missing")["waiting"]
    assert missing["reason"] == "RunContainerError"
    assert missing["message"] == 'exec: "no-such-binary-pykubevirt": executable file not found in $PATH'
    claims = state(pod, "claims")["waiting"]
    assert claims["reason"] == "CreateContainerConfigError"
    assert claims["message"] == 'persistentvolumeclaim "pvc" not found'
    assert phase(pod) == "Pending"


async def test_a_bound_claim_is_its_volume_directory_and_a_block_claim_its_file(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    block_file = tmp_path / "block.img"
    block_file.write_bytes(b"\0" * 4096)
    for name, mode, path in (("fs", "Filesystem", tmp_path / "fs"), ("blk", "Block", block_file)):
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{ns}-{name}"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "hostPath": {"path": str(path)},
                "volumeMode": mode,
            },
        }
        await env.client.create(PERSISTENT_VOLUMES, volume)
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
                "volumeMode": mode,
            },
        }
        await env.client.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
        # What the PV controller writes when it binds (it does not run here).
        await env.client.patch(PERSISTENT_VOLUME_CLAIMS, name, {"spec": {"volumeName": f"{ns}-{name}"}}, ns)
        await env.client.patch(PERSISTENT_VOLUME_CLAIMS, name, {"status": {"phase": "Bound"}}, ns, subresource="status")
    writer = (
        "import json, os, pathlib\n"
        "mounts = json.loads(os.environ['PYKUBEVIRT_MOUNTS'])\n"
        "pathlib.Path(mounts['/data'], 'note').write_text(str(os.path.getsize(mounts['/dev/blk'])))\n"
    )
    body = pod_manifest(
        "claims",
        env.node,
        py(
            "main",
            writer,
            volumeMounts=[{"name": "fs", "mountPath": "/data"}],
            volumeDevices=[{"name": "blk", "devicePath": "/dev/blk"}],
        ),
        volumes=[
            {"name": "fs", "persistentVolumeClaim": {"claimName": "fs"}},
            {"name": "blk", "persistentVolumeClaim": {"claimName": "blk"}},
        ],
    )
    await env.client.create(PODS, body, ns)
    await wait_pod(env.client, ns, "claims", lambda pod: phase(pod) == "Succeeded")
    assert (tmp_path / "fs" / "note").read_text() == "4096"


# ------------------------------------------------------------------------------------------------------ readiness


async def test_readiness_gates_hold_ready_until_their_condition_is_true(env: Env) -> None:
    ns = await env.namespace()
    body = pod_manifest(
        "gated",
        env.node,
        py("main", "import time; time.sleep(600)"),
        readinessGates=[{"conditionType": UNPAUSED_GATE}],
    )
    await env.client.create(PODS, body, ns)
    pod = await wait_pod(env.client, ns, "gated", lambda p: condition(p, "ContainersReady").get("status") == "True")
    ready = condition(pod, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert ready["message"] == f'corresponding condition of pod readiness gate "{UNPAUSED_GATE}" does not exist.'

    async def set_gate(value: str) -> None:
        # What virt-controller does: the whole conditions list with the gate condition replaced.
        current = await env.client.get(PODS, "gated", ns)
        conditions = [c for c in current["status"]["conditions"] if c["type"] != UNPAUSED_GATE]
        conditions.append({"type": UNPAUSED_GATE, "status": value, "reason": "Test"})
        await env.client.patch(PODS, "gated", {"status": {"conditions": conditions}}, ns, subresource="status")

    await set_gate("True")
    pod = await wait_pod(env.client, ns, "gated", lambda p: condition(p, "Ready").get("status") == "True")
    await set_gate("False")
    pod = await wait_pod(env.client, ns, "gated", lambda p: condition(p, "Ready").get("status") == "False")
    assert condition(pod, "Ready")["message"] == (
        f'the status of pod readiness gate "{UNPAUSED_GATE}" is not "True", but False'
    )
    await synced(env, pod["metadata"]["uid"], times=3)  # the gate condition is someone else's and must stay
    pod = await env.client.get(PODS, "gated", ns)
    assert condition(pod, UNPAUSED_GATE)["status"] == "False"
    assert condition(pod, "Ready")["status"] == "False"


async def test_status_is_written_only_when_it_changes(env: Env) -> None:
    ns = await env.namespace()
    await env.client.create(PODS, pod_manifest("steady", env.node, py("main", "import time; time.sleep(600)")), ns)
    pod = await wait_pod(env.client, ns, "steady", lambda p: condition(p, "Ready").get("status") == "True")
    await synced(env, pod["metadata"]["uid"], times=5)
    again = await env.client.get(PODS, "steady", ns)
    assert again["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
    await env.client.delete(PODS, "steady", ns)
    await wait_gone(env.client, ns, "steady")


# ------------------------------------------------------------------------------------------------------ deletion


async def test_deletion_sends_sigterm_then_deletes_the_pod(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    graceful = (
        "import json, os, pathlib, signal, sys, time\n"
        "out = pathlib.Path(json.loads(os.environ['PYKUBEVIRT_MOUNTS'])['/out'])\n"
        "def bye(signum, frame):\n"
        "    (out / 'marker').write_text(f'got {signum}'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print(os.getpid(), flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    body = pod_manifest(
        "graceful",
        env.node,
        py("main", graceful, volumeMounts=[{"name": "out", "mountPath": "/out"}]),
        volumes=[{"name": "out", "hostPath": {"path": str(tmp_path / "out"), "type": "DirectoryOrCreate"}}],
        terminationGracePeriodSeconds=30,
    )
    await env.client.create(PODS, body, ns)
    pod = await wait_pod(env.client, ns, "graceful", lambda p: phase(p) == "Running")
    child = await printed_pid(env, pod, "main")
    wrapper = pid_of(pod, "main")
    started = time.monotonic()
    await env.client.delete(PODS, "graceful", ns)
    await wait_gone(env.client, ns, "graceful")
    assert time.monotonic() - started < 10, "the process ended on SIGTERM; no need to wait for the grace period"
    assert (tmp_path / "out" / "marker").read_text() == f"got {signal.SIGTERM.value}"
    assert not alive(child) and not alive(wrapper)
    await until(lambda: not (env.agent.data_dir / "pods" / pod["metadata"]["uid"]).exists())


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(env: Env) -> None:
    ns = await env.namespace()
    stubborn = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print(os.getpid(), flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    body = pod_manifest("stubborn", env.node, py("main", stubborn), terminationGracePeriodSeconds=2)
    await env.client.create(PODS, body, ns)
    pod = await wait_pod(env.client, ns, "stubborn", lambda p: phase(p) == "Running")
    child = await printed_pid(env, pod, "main")
    started = time.monotonic()
    await env.client.delete(PODS, "stubborn", ns)
    terminating = await wait_pod(env.client, ns, "stubborn", lambda p: bool(p["metadata"].get("deletionTimestamp")))
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 2
    await consistently(lambda: alive(child), for_=1)  # SIGTERM is ignored and the grace period is not over
    await wait_gone(env.client, ns, "stubborn")
    elapsed = time.monotonic() - started
    assert 2 <= elapsed < 8, elapsed
    assert not alive(child)


async def test_final_status_is_reported_before_the_pod_is_deleted(env: Env) -> None:
    ns = await env.namespace()
    body = pod_manifest("final", env.node, py("main", "import time; time.sleep(600)"))
    await env.client.create(PODS, body, ns)
    await wait_pod(env.client, ns, "final", lambda p: phase(p) == "Running")
    seen: list[Object] = []

    async def watch() -> None:
        async for event in env.client.watch(PODS, ns, field_selector="metadata.name=final", timeout_seconds=20):
            seen.append(event.object)
            if event.type == "DELETED":
                return

    watcher = asyncio.create_task(watch())
    await eventually(lambda: seen)  # the watch is open: it listed the pod
    await env.client.delete(PODS, "final", ns)
    await asyncio.wait_for(watcher, 20)
    final = seen[-1]
    assert phase(final) == "Failed", "killed by SIGTERM: exit 143"
    terminated = state(final, "main")["terminated"]
    assert terminated["exitCode"] == 128 + signal.SIGTERM.value


async def test_force_deleted_pod_processes_are_killed_at_once(env: Env) -> None:
    ns = await env.namespace()
    body = pod_manifest(
        "forced", env.node, py("main", "import os, time; print(os.getpid(), flush=True); time.sleep(600)")
    )
    await env.client.create(PODS, body, ns)
    pod = await wait_pod(env.client, ns, "forced", lambda p: phase(p) == "Running")
    child = await printed_pid(env, pod, "main")
    wrapper = pid_of(pod, "main")
    await env.client.delete(PODS, "forced", ns, grace_period_seconds=0)
    assert await get_pod(env.client, ns, "forced") is None
    await until(lambda: not alive(child) and not alive(wrapper), timeout=5)
    await until(lambda: not (env.agent.data_dir / "pods" / pod["metadata"]["uid"]).exists(), timeout=5)


# ------------------------------------------------------------------------------------------------------ containerDisk


def launcher_pod(name: str, image: str, node: str, seconds: int = 600) -> Object:
    """A virt-launcher pod as virt-controller renders it, its compute command replaced by a sleeping Python."""
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "128Mi"},
            },
            "volumes": [{"name": "root", "containerDisk": {"image": image}}],
        },
    }
    settings = LauncherSettings(command_prefix=(PY, "-c", f"import time; time.sleep({seconds})"))
    pod = render_launcher_pod(vmi, settings)
    pod["metadata"] = {"name": name, "annotations": pod["metadata"]["annotations"]}
    pod["spec"]["nodeName"] = node
    pod["spec"]["terminationGracePeriodSeconds"] = 5
    return pod


async def test_container_disk_containers_link_the_image_disk(env: Env) -> None:
    ns = await env.namespace()
    body = launcher_pod("launcher", DEMO_IMAGE, env.node)
    await env.client.create(PODS, body, ns)

    pod = await wait_pod(env.client, ns, "launcher", all_running)
    for init in ("container-disk-binary", "volumeroot-init"):
        terminated = state(pod, init, init=True)["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert state(pod, "volumeroot")["running"]
    assert state(pod, "compute")["running"]
    assert condition(pod, "Ready")["status"] == "False", "the unpaused readiness gate is virt-controller's"
    volume = env.agent.data_dir / "pods" / pod["metadata"]["uid"] / "volumes" / "container-disks"
    link = volume / "disk_0.img"
    assert link.is_symlink()
    assert link.resolve() == env.images.lookup(DEMO_IMAGE)
    await env.client.delete(PODS, "launcher", ns)
    await wait_gone(env.client, ns, "launcher")


async def test_a_launcher_pod_completes_when_its_launcher_exits(env: Env) -> None:
    # As after a migration away or a guest shutdown: the container-disk server and the console log end with the
    # launcher, so the pod is Succeeded (kubectl shows Completed) and a drain's eviction may take it.
    ns = await env.namespace()
    await env.client.create(PODS, launcher_pod("done", DEMO_IMAGE, env.node, seconds=1), ns)
    pod = await wait_pod(env.client, ns, "done", lambda p: phase(p) == "Succeeded")
    for name, init in (("compute", False), ("volumeroot", False), ("guest-console-log", True)):
        terminated = state(pod, name, init=init)["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed"), name
    await env.client.delete(PODS, "done", ns)
    await wait_gone(env.client, ns, "done")


async def test_a_missing_container_disk_image_is_err_image_pull_then_back_off(env: Env) -> None:
    ns = await env.namespace()
    await env.client.create(PODS, launcher_pod("nodisk", MISSING_IMAGE, env.node), ns)

    def waiting_on(reason: str) -> Callable[[Object], bool]:
        return lambda pod: state(pod, "volumeroot-init", init=True).get("waiting", {}).get("reason") == reason

    pod = await wait_pod(env.client, ns, "nodisk", waiting_on("ErrImagePull"))
    message = state(pod, "volumeroot-init", init=True)["waiting"]["message"]
    assert message.startswith(f'Failed to pull image "{MISSING_IMAGE}"') and "connection refused" in message
    assert "\n" not in message and "level=fatal" not in message
    assert phase(pod) == "Pending"
    assert state(pod, "compute")["waiting"]["reason"] == "PodInitializing"
    pod = await wait_pod(env.client, ns, "nodisk", waiting_on("ImagePullBackOff"))
    backoff = state(pod, "volumeroot-init", init=True)["waiting"]["message"]
    assert backoff.startswith(f'Back-off pulling image "{MISSING_IMAGE}"')
    await env.client.delete(PODS, "nodisk", ns)
    await wait_gone(env.client, ns, "nodisk")


# ------------------------------------------------------------------------------------------------------ sidecars


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


async def test_native_sidecars_run_next_to_later_init_containers_and_end_with_the_pod(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    marker = f"sidecar-{uuid.uuid4().hex[:8]}"
    shared = [{"name": "scratch", "mountPath": "/shared"}]
    mounts = "import json, os, pathlib, time\nshared = json.loads(os.environ['PYKUBEVIRT_MOUNTS'])['/shared']\n"
    helper = mounts + f"pathlib.Path(shared, 'up').write_text('{marker}')\ntime.sleep(600)\n"
    # `setup` can only succeed while the sidecar before it runs: it waits for the sidecar's file.
    setup = mounts + "while not pathlib.Path(shared, 'up').exists(): time.sleep(0.05)\n"
    body = pod_manifest(
        "sidecars",
        env.node,
        py("main", UNTIL_GO, volumeMounts=[{"name": "go", "mountPath": "/go"}]),
        initContainers=[
            py("helper", helper, restartPolicy="Always", volumeMounts=shared),
            py("setup", setup, volumeMounts=shared),
        ],
        volumes=[
            {"name": "scratch", "emptyDir": {}},
            {"name": "go", "hostPath": {"path": str(tmp_path / "go"), "type": "DirectoryOrCreate"}},
        ],
    )
    await env.client.create(PODS, body, ns)
    running = await wait_pod(env.client, ns, "sidecars", lambda p: phase(p) == "Running")
    sidecar = status_of(running, "helper", init=True)
    assert sidecar["started"] and sidecar["ready"] and "running" in sidecar["state"]
    assert state(running, "setup", init=True)["terminated"]["exitCode"] == 0
    assert condition(running, "Initialized")["status"] == "True"
    (tmp_path / "go" / "go").write_text("")
    final = await wait_pod(env.client, ns, "sidecars", lambda p: "terminated" in state(p, "helper", init=True))
    assert phase(final) == "Succeeded", "a sidecar's end does not count in the phase"
    assert state(final, "main")["terminated"]["exitCode"] == 0
    assert status_of(final, "helper", init=True)["ready"] is False
    await until(lambda: not processes_mentioning(marker), timeout=10)


async def test_a_sidecar_stopped_at_the_end_of_its_pod_is_not_restarted(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stress run's race, made certain: the sidecar dies of the agent's SIGTERM before the same sync writes the
    # status (on a loaded host it may). Its exit is not recorded yet; it must not read as "never started" (the pod
    # back to Pending) nor be restarted by its restartPolicy: Always once the pod is over.
    runtime = env.agent.runtime
    plain_terminate = runtime.terminate

    def terminate_and_wait(pid: int, ticks: int) -> bool:
        sent = plain_terminate(pid, ticks)
        deadline = time.monotonic() + 10
        while processes_alive(pid, ticks) and time.monotonic() < deadline:
            time.sleep(0.01)
        return sent

    monkeypatch.setattr(runtime, "terminate", terminate_and_wait)
    ns = await env.namespace()
    marker = f"sidecar-{uuid.uuid4().hex[:8]}"
    helper = f"import time\nmarker = '{marker}'\ntime.sleep(600)\n"
    body = pod_manifest(
        "ended",
        env.node,
        py("main", "import time; time.sleep(1)"),
        initContainers=[py("helper", helper, restartPolicy="Always")],
    )
    phases: list[str] = []

    async def watch() -> None:
        async for event in env.client.watch(PODS, ns, field_selector="metadata.name=ended", timeout_seconds=30):
            phases.append(phase(event.object))
            if phase(event.object) in ("Succeeded", "Failed"):
                return

    watcher = asyncio.create_task(watch())
    await env.client.create(PODS, body, ns)
    await asyncio.wait_for(watcher, 30)
    final = await wait_pod(env.client, ns, "ended", lambda p: "terminated" in state(p, "helper", init=True))
    assert phase(final) == "Succeeded"
    seen = [p for i, p in enumerate(phases) if p and (i == 0 or p != phases[i - 1])]
    assert seen[-2:] == ["Running", "Succeeded"] and "Pending" not in seen[seen.index("Running") :], phases
    helper_status = status_of(final, "helper", init=True)
    assert helper_status["restartCount"] == 0, helper_status
    assert helper_status["state"]["terminated"]["exitCode"] == 128 + signal.SIGTERM.value
    await consistently(lambda: not processes_mentioning(marker), for_=2)
    assert status_of(await get_pod(env.client, ns, "ended") or {}, "helper", init=True)["restartCount"] == 0


async def test_guest_console_log_serves_the_serial_log_without_a_process(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    home = tmp_path / "home"
    body = launcher_pod("console", DEMO_IMAGE, env.node)
    sidecar = body["spec"]["initContainers"][0]
    assert (sidecar["name"], sidecar["command"], sidecar["restartPolicy"]) == (
        "guest-console-log",
        ["/usr/bin/virt-tail"],
        "Always",
    )
    log_in_pod = sidecar["args"][1]  # /var/run/kubevirt-private/<vmi uid>/virt-serial0-log
    await env.client.create(PODS, body, ns)

    pod = await wait_pod(env.client, ns, "console", all_running)
    console = status_of(pod, "guest-console-log", init=True)
    assert console["started"] and console["ready"] and "running" in console["state"]
    assert console["containerID"].startswith("virtual://")
    assert not processes_mentioning(log_in_pod), "no tail process runs for a VM"
    assert condition(pod, "Initialized")["status"] == "True", "the container-disk init containers did not wait"

    def logs(*args: str) -> Any:
        return in_thread(kubectl, env.server, home, "logs", "-n", ns, "console", "-c", "guest-console-log", *args)

    # The launcher creates the file when the domain starts; until then the log is empty, not an error.
    assert (await logs()).stdout == ""
    follow = await asyncio.create_subprocess_exec(
        KUBECTL,
        *("logs", "-n", ns, "console", "-c", "guest-console-log", "-f"),
        env=kubectl_env(env.server, home),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert follow.stdout is not None
    # As the launcher does: <private volume>/<vmi uid> links to a directory of its own, where libvirt writes.
    private = env.agent.data_dir / "pods" / pod["metadata"]["uid"] / "volumes" / "private"
    vmi_dir = Path(log_in_pod).parent.name
    (tmp_path / "short").mkdir()
    (private / vmi_dir).symlink_to(tmp_path / "short")
    serial = private / vmi_dir / Path(log_in_pod).name
    serial.write_text("SeaBIOS\nBooting from Hard Disk...\n")
    assert await asyncio.wait_for(follow.stdout.readline(), 10) == b"SeaBIOS\n"
    assert await asyncio.wait_for(follow.stdout.readline(), 10) == b"Booting from Hard Disk...\n"
    with serial.open("a") as appended:
        appended.write("login: \n")
    assert await asyncio.wait_for(follow.stdout.readline(), 10) == b"login: \n"

    assert (await logs()).stdout == "SeaBIOS\nBooting from Hard Disk...\nlogin: \n"
    assert (await logs("--tail=1")).stdout == "login: \n"
    stamp, text = (await logs("--tail=1", "--timestamps")).stdout.strip().split(" ", 1)
    assert text == "login:" and stamp.endswith("Z")
    assert follow.returncode is None, "the follow lasts as long as the pod runs"

    await env.client.delete(PODS, "console", ns)
    await asyncio.wait_for(follow.wait(), 20)
    assert follow.returncode == 0
    await wait_gone(env.client, ns, "console")


# ------------------------------------------------------------------------------------------------------ logs


async def test_kubectl_logs_reads_follows_and_explains_errors(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    home = tmp_path / "home"
    chatty = "import time\nfor i in range(3):\n    print(f'line {i}', flush=True); time.sleep(0.7)\n"
    body = pod_manifest(
        "chatty",
        env.node,
        py("talker", chatty),
        py("quiet", "import time; print('shh', flush=True); time.sleep(600)"),
    )
    await env.client.create(PODS, body, ns)
    await wait_pod(env.client, ns, "chatty", lambda p: phase(p) == "Running")
    followed = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "chatty", "-c", "talker", "-f")
    assert followed.stdout == "line 0\nline 1\nline 2\n"
    tail = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "chatty", "-c", "talker", "--tail=1")
    assert tail.stdout == "line 2\n"
    stamped = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "chatty", "-c", "quiet", "--timestamps")
    stamp, text = stamped.stdout.strip().split(" ", 1)
    assert text == "shh" and stamp.endswith("Z") and "T" in stamp
    recent = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "chatty", "-c", "quiet", "--since=1s")
    assert recent.stdout == "", "nothing was written in the last second"

    # kubectl picks the first container itself ("Defaulted container"); the API's own answer names them all.
    with pytest.raises(BadRequest) as unnamed:
        await env.client.request("GET", PODS.path(ns, "chatty", "log"))
    assert unnamed.value.message == "a container name must be specified for pod chatty, choose one of: [talker quiet]"
    defaulted = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "chatty")
    assert 'Defaulted container "talker"' in defaulted.stderr
    with pytest.raises(BadRequest) as invalid:
        await env.client.request("GET", PODS.path(ns, "chatty", "log"), params={"container": "nope"})
    assert invalid.value.message == "container nope is not valid for pod chatty"
    previous = await in_thread(
        kubectl, env.server, home, "logs", "-n", ns, "chatty", "-c", "quiet", "--previous", check=False
    )
    assert 'previous terminated container "quiet" in pod "chatty" not found' in previous.stderr
    missing = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "nothing-here", check=False)
    assert 'pods "nothing-here" not found' in missing.stderr

    await env.client.create(PODS, pod_manifest("unbound", None, py("main", "pass")), ns)
    unbound = await in_thread(kubectl, env.server, home, "logs", "-n", ns, "unbound", check=False)
    assert "pod unbound does not have a host assigned" in unbound.stderr


async def test_kubectl_logs_uses_the_default_container_annotation(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    body = pod_manifest("annotated", env.node, py("side", "print('side')"), py("compute", "print('compute says hi')"))
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "compute"}
    await env.client.create(PODS, body, ns)
    await wait_pod(env.client, ns, "annotated", lambda p: phase(p) == "Succeeded")
    result = await in_thread(kubectl, env.server, tmp_path / "home", "logs", "-n", ns, "annotated")
    assert result.stdout == "compute says hi\n"


async def test_logs_of_a_pod_on_an_unreachable_node_fail_clearly(env: Env, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    ghost = unique("ghost")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ghost}}
    await env.client.create(NODES, node)
    status = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": closed_port}},
    }
    await env.client.patch(NODES, ghost, {"status": status}, subresource="status")
    ns = await env.namespace()
    await env.client.create(PODS, pod_manifest("haunted", ghost, py("main", "pass")), ns)
    result = await in_thread(kubectl, env.server, tmp_path / "home", "logs", "-n", ns, "haunted", check=False)
    assert result.returncode != 0
    assert f'unable to reach node "{ghost}"' in result.stderr
    await env.client.delete(NODES, ghost)


# ------------------------------------------------------------------------------------------------------ several agents


async def test_two_agents_on_one_host_run_only_their_own_pods(env: Env) -> None:
    ns = await env.namespace()
    agents = [
        NodeAgent(env.client, unique("twin"), env.root / unique("twin-data"), env.images, heartbeat_interval=1.0)
        for _ in range(2)
    ]
    for agent in agents:
        await agent.start()
    try:
        assert agents[0].log_port != agents[1].log_port
        for index, agent in enumerate(agents):
            code = f"print('on {agent.name}')"
            await env.client.create(PODS, pod_manifest(f"pod{index}", agent.name, py("main", code)), ns)
        for index, agent in enumerate(agents):
            pod = await wait_pod(env.client, ns, f"pod{index}", lambda p: phase(p) == "Succeeded")
            uid = pod["metadata"]["uid"]
            assert log_file(agent.data_dir, pod, "main").read_text() == f"on {agent.name}\n"
            others = [a for a in [*agents, env.agent] if a is not agent]
            assert all(not (other.data_dir / "pods" / uid).exists() for other in others)
        for index, agent in enumerate(agents):
            # Each agent has the directory of its own pod and nothing else (the session has other nodes' pods).
            own = (await env.client.get(PODS, f"pod{index}", ns))["metadata"]["uid"]
            assert [d.name for d in (agent.data_dir / "pods").iterdir()] == [own]
            assert set(agent.workers) <= {own}
    finally:
        for agent in agents:
            await agent.stop()
            kill_leftover_pods(agent.data_dir)
            await forget_node(env.client, agent.name)


async def test_a_data_dir_serves_one_agent_and_one_node_name(env: Env, tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="in use by another node agent"):
        await NodeAgent(env.client, unique("intruder"), env.agent.data_dir, env.images).start()
    first = NodeAgent(env.client, unique("first"), tmp_path / "data", env.images)
    await first.start()
    await first.stop()
    await forget_node(env.client, first.name)
    with pytest.raises(DataDirError, match=f"belongs to node '{first.name}'"):
        await NodeAgent(env.client, unique("second"), tmp_path / "data", env.images).start()


# ------------------------------------------------------------------------------------------------------ re-adoption


async def test_a_restarted_agent_readopts_running_pods_without_restarting_them(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    name = unique("phoenix")
    data = tmp_path / "phoenix"
    agent = NodeAgentProcess(env.server.kubeconfig, name, data, env.root / "images").start()
    try:
        body = pod_manifest(
            "survivor",
            name,
            py("steady", "import time; time.sleep(600)"),
            py("brief", "import sys, time; time.sleep(3); sys.exit(7)"),
        )
        await env.client.create(PODS, body, ns)
        pod = await wait_pod(env.client, ns, "survivor", lambda p: phase(p) == "Running")
        steady, brief = pid_of(pod, "steady"), pid_of(pod, "brief")
        ticks = start_ticks(steady)

        agent.stop(signal.SIGKILL)  # no goodbye at all
        assert alive(steady), "stopping the agent never stops pods"
        await until(lambda: not alive(brief))  # `brief` exits while nobody watches
        agent.start()

        def brief_done(pod: Object) -> bool:
            return bool(state(pod, "brief").get("terminated"))

        pod = await wait_pod(env.client, ns, "survivor", brief_done)
        assert state(pod, "brief")["terminated"]["exitCode"] == 7, "the exit recorder kept the exit code"

        async def steady_untouched() -> bool:
            pod = await env.client.get(PODS, "survivor", ns)
            assert phase(pod) == "Running"
            assert pid_of(pod, "steady") == steady and start_ticks(steady) == ticks
            assert status_of(pod, "steady")["restartCount"] == 0
            assert state(pod, "steady")["running"]
            return True

        await consistently(steady_untouched, for_=2)

        agent.stop()  # a polite stop keeps pods too
        assert alive(steady)
        agent.start()
        await env.client.delete(PODS, "survivor", ns)
        await wait_gone(env.client, ns, "survivor")
        assert not alive(steady)
    finally:
        agent.stop()
        kill_leftover_pods(data)
        await forget_node(env.client, name)


async def test_a_restarted_agent_kills_the_processes_of_pods_deleted_meanwhile(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    name = unique("lazarus")
    data = tmp_path / "lazarus"
    agent = NodeAgentProcess(env.server.kubeconfig, name, data, env.root / "images").start()
    try:
        await env.client.create(PODS, pod_manifest("orphan", name, py("main", "import time; time.sleep(600)")), ns)
        pod = await wait_pod(env.client, ns, "orphan", lambda p: phase(p) == "Running")
        pid = pid_of(pod, "main")
        agent.stop()
        await env.client.delete(PODS, "orphan", ns, grace_period_seconds=0)
        assert alive(pid)
        agent.start()
        await until(lambda: not alive(pid))
        await until(lambda: not (data / "pods" / pod["metadata"]["uid"]).exists())
    finally:
        agent.stop()
        kill_leftover_pods(data)
        await forget_node(env.client, name)


# ------------------------------------------------------------------------------------------------------ pure helpers


async def test_tail_offset_counts_lines_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\nb\nc\n")
    assert [tail_offset(path, n) for n in (0, 1, 2, 3, 9)] == [6, 4, 2, 0, 0]
    path.write_bytes(b"a\nb")
    assert tail_offset(path, 1) == 2


async def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$$(A) $(C) $", env) == "$(A) $(C) $"
