"""Kubernetes storage in the embedded cluster: PV/PVC/StorageClass semantics, binding, WaitForFirstConsumer with the
scheduler, reclaim, protection and expansion, against a real API server process with the storage controller and the
scheduler running in-process (fake Node objects: no node agent is needed to bind a pod).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api.quantity import MI
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import (
    EVENTS,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    STORAGE_CLASSES,
)
from pykubevirt.launcher.pvc_disks import prepare_pvc_disk
from tests.integration.test_scheduler import node_manifest, pod_manifest
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.storage_plane import storage_on_fake_nodes
from tests.support.waiting import eventually

PVCS, PVS = PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES


@pytest.fixture(scope="module")
def storage_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("storage-apiserver") / "data").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def storage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("volumes")


@pytest.fixture
async def cluster(storage_server: APIServerProcess, storage_dir: Path) -> AsyncIterator[KubeClient]:
    """The storage controller and the scheduler on the module's server, two schedulable fake nodes (n1 first)."""
    nodes = [node_manifest("n1", memory="16Gi"), node_manifest("n2", memory="1Gi")]
    async with storage_on_fake_nodes(storage_server, storage_dir, nodes) as admin:
        yield admin


async def new_namespace(admin: KubeClient, name: str) -> str:
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def claim(name: str, size: str = "64Mi", **spec: Any) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec},
    }


def volume(name: str, path: Path, size: str, class_name: str = "manual", **extra: Any) -> Object:
    labels = extra.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": size},
            "hostPath": {"path": str(path)},
            "storageClassName": class_name,
            **extra,
        },
    }


async def phase_of(admin: KubeClient, resource: Any, name: str, namespace: str | None = None) -> str:
    try:
        obj = await admin.get(resource, name, namespace)
    except NotFound:
        return "<gone>"
    return str((obj.get("status") or {}).get("phase") or "")


async def wait_phase(admin: KubeClient, resource: Any, name: str, phase: str, namespace: str | None = None) -> None:
    async def probe() -> bool:
        return await phase_of(admin, resource, name, namespace) == phase

    await eventually(probe, timeout=20)


async def events_of(admin: KubeClient, namespace: str, name: str) -> list[tuple[str, str]]:
    items = (await admin.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}"))["items"]
    return [(str(e.get("reason")), str(e.get("message"))) for e in items]


async def invalid_message(call: Any) -> str:
    with pytest.raises(ApiError) as caught:
        await call
    return str(caught.value.message)


async def test_defaults_validation_and_immutability(cluster: KubeClient) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-validation")
    # The storage controller created the embedded classes; `local` is the default.
    local = await eventually(lambda: admin.get(STORAGE_CLASSES, "local"))
    assert local["provisioner"] == "pykubevirt.io/local-path"
    assert local["volumeBindingMode"] == "WaitForFirstConsumer"
    created = await admin.create(PVCS, claim("defaults"), ns)
    assert created["spec"]["storageClassName"] == "local"
    assert created["spec"]["volumeMode"] == "Filesystem"
    assert created["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert created["status"]["phase"] == "Pending"
    explicit_none = await admin.create(PVCS, claim("no-class", storageClassName=""), ns)
    assert explicit_none["spec"]["storageClassName"] == ""

    message = await invalid_message(admin.create(PVCS, claim("bad", accessModes=[]), ns))
    assert message == (
        'PersistentVolumeClaim "bad" is invalid: spec.accessModes: Required value: at least 1 access mode is required'
    )
    no_size = claim("nosize")
    no_size["spec"]["resources"] = {}
    assert "spec.resources[storage]: Required value" in await invalid_message(admin.create(PVCS, no_size, ns))
    changed = dict(created, spec=dict(created["spec"], accessModes=["ReadWriteMany"]))
    message = await invalid_message(admin.update(PVCS, changed))
    assert "spec: Forbidden: spec is immutable after creation except resources.requests" in message

    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "st-bad"}}
    message = await invalid_message(admin.create(STORAGE_CLASSES, dict(sc, reclaimPolicy="Recycle")))
    assert message == (
        'StorageClass.storage.k8s.io "st-bad" is invalid: [provisioner: Required value, '
        'reclaimPolicy: Unsupported value: "Recycle": supported values: "Delete", "Retain"]'
    )
    fine = await admin.create(STORAGE_CLASSES, dict(sc, metadata={"name": "st-fine"}, provisioner="example.com/x"))
    assert (fine["reclaimPolicy"], fine["volumeBindingMode"]) == ("Delete", "Immediate")
    message = await invalid_message(admin.update(STORAGE_CLASSES, dict(fine, provisioner="example.com/y")))
    assert "provisioner: Forbidden: updates to provisioner are forbidden." in message

    pv = volume("st-nosource", Path("/tmp"), "1Gi")
    del pv["spec"]["hostPath"]
    message = await invalid_message(admin.create(PVS, pv))
    assert message == 'PersistentVolume "st-nosource" is invalid: spec: Required value: must specify a volume type'


async def test_kubectl_columns(cluster: KubeClient, storage_server: APIServerProcess, tmp_path: Path) -> None:
    await eventually(lambda: cluster.get(STORAGE_CLASSES, "shared"))
    out = kubectl(storage_server, tmp_path, "get", "sc", "local", "shared").stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    assert out[1].split()[:6] == [
        "local",
        "(default)",
        "pykubevirt.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
        "true",
    ]
    assert out[2].split()[:5] == ["shared", "pykubevirt.io/local-path", "Delete", "Immediate", "true"]


async def test_static_binding_by_class_size_modes_and_selector_then_retain(cluster: KubeClient, tmp_path: Path) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-static")
    retain = {"persistentVolumeReclaimPolicy": "Retain"}
    await admin.create(PVS, volume("st-small", tmp_path / "small", "100Mi", labels={"tier": "gold"}, **retain))
    await admin.create(PVS, volume("st-big", tmp_path / "big", "1Gi", labels={"tier": "gold"}, **retain))
    await admin.create(PVS, volume("st-silver", tmp_path / "silver", "100Mi", labels={"tier": "silver"}, **retain))
    await admin.create(PVS, volume("st-rwx", tmp_path / "rwx", "5Gi", accessModes=["ReadWriteMany"], **retain))
    await wait_phase(admin, PVS, "st-small", "Available")
    selector = {"matchLabels": {"tier": "gold"}}
    await admin.create(PVCS, claim("data", "90Mi", storageClassName="manual", selector=selector), ns)
    await admin.create(PVCS, claim("shared", "1Gi", storageClassName="manual", accessModes=["ReadWriteMany"]), ns)
    await wait_phase(admin, PVCS, "data", "Bound", ns)
    await wait_phase(admin, PVCS, "shared", "Bound", ns)
    data = await admin.get(PVCS, "data", ns)
    # The smallest gold volume that fits, with the volume's capacity and modes on the claim.
    assert data["spec"]["volumeName"] == "st-small"
    assert data["status"]["capacity"] == {"storage": "100Mi"}
    assert data["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert (await admin.get(PVCS, "shared", ns))["spec"]["volumeName"] == "st-rwx"
    small = await admin.get(PVS, "st-small")
    assert small["spec"]["claimRef"]["name"] == "data"
    assert small["status"]["phase"] == "Bound"
    assert (await admin.get(PVS, "st-big"))["status"]["phase"] == "Available"

    # Deleting the claim releases the volume; Retain keeps it (and its data) for an administrator.
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "keep").write_text("x")
    await admin.delete(PVCS, "data", ns)
    await wait_phase(admin, PVS, "st-small", "Released")
    assert (tmp_path / "small" / "keep").read_text() == "x"
    # A bound volume's pv-protection finalizer holds its deletion until the claim is gone.
    await admin.delete(PVS, "st-rwx")
    assert await phase_of(admin, PVS, "st-rwx") == "Bound"
    await admin.delete(PVCS, "shared", ns)
    await wait_phase(admin, PVS, "st-rwx", "<gone>")


async def test_wait_for_first_consumer_with_the_scheduler_and_reclaim(cluster: KubeClient, storage_dir: Path) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-wffc")
    await admin.create(PVCS, claim("disk", "128Mi"), ns)

    async def waiting_event() -> bool:
        return ("WaitForFirstConsumer", "waiting for first consumer to be created before binding") in await events_of(
            admin, ns, "disk"
        )

    await eventually(waiting_event)
    assert await phase_of(admin, PVCS, "disk", ns) == "Pending"
    # The pod fits only n1 (n2 has 1Gi): the claim gets n1, the provisioner makes the volume there.
    volumes = [{"name": "disk", "persistentVolumeClaim": {"claimName": "disk"}}]
    pod = pod_manifest("user", memory="2Gi", volumes=volumes)
    pod["metadata"]["namespace"] = ns
    await admin.create(PODS, pod, ns)
    await wait_phase(admin, PVCS, "disk", "Bound", ns)
    pvc = await admin.get(PVCS, "disk", ns)
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n1"
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == "pykubevirt.io/local-path"
    pv_name = pvc["spec"]["volumeName"]
    assert pv_name == f"pvc-{pvc['metadata']['uid']}"
    pv = await admin.get(PVS, pv_name)
    directory = storage_dir / "n1" / f"{pv_name}_{ns}_disk"
    assert pv["spec"]["hostPath"]["path"] == str(directory)
    assert directory.is_dir()
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"

    async def pod_on_n1() -> bool:
        return (await admin.get(PODS, "user", ns))["spec"].get("nodeName") == "n1"

    await eventually(pod_on_n1)
    reasons = [reason for reason, _ in await events_of(admin, ns, "disk")]
    assert {"ExternalProvisioning", "Provisioning", "ProvisioningSucceeded"} <= set(reasons)

    # pvc-protection: the claim outlives its deletion while the pod uses it; then Delete reclaims the volume.
    await admin.delete(PVCS, "disk", ns)
    assert (await admin.get(PVCS, "disk", ns))["metadata"]["deletionTimestamp"]
    await admin.delete(PODS, "user", ns, grace_period_seconds=0)
    await wait_phase(admin, PVCS, "disk", "<gone>", ns)
    await wait_phase(admin, PVS, pv_name, "<gone>")
    assert not directory.exists()


async def test_immediate_shared_class_and_expansion_grows_disk_img(cluster: KubeClient, storage_dir: Path) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-expand")
    await eventually(lambda: admin.get(STORAGE_CLASSES, "shared"))
    await admin.create(PVCS, claim("grow", "64Mi", storageClassName="shared", accessModes=["ReadWriteMany"]), ns)
    await wait_phase(admin, PVCS, "grow", "Bound", ns)
    pvc = await admin.get(PVCS, "grow", ns)
    pv = await admin.get(PVS, pvc["spec"]["volumeName"])
    assert "nodeAffinity" not in pv["spec"]
    directory = Path(pv["spec"]["hostPath"]["path"])
    assert directory.parent == storage_dir / "shared"
    image = directory / "disk.img"
    await prepare_pvc_disk(image, pvc, overhead=0.0)
    assert image.stat().st_size == 64 * MI

    # Too small a request is refused; a class that allows expansion grows the volume and the claim's capacity.
    message = await invalid_message(
        admin.patch(PVCS, "grow", {"spec": {"resources": {"requests": {"storage": "32Mi"}}}}, ns)
    )
    assert "field can not be less than status.capacity" in message
    await admin.patch(PVCS, "grow", {"spec": {"resources": {"requests": {"storage": "256Mi"}}}}, ns)

    async def grown() -> Object | None:
        claim_now = await admin.get(PVCS, "grow", ns)
        return claim_now if claim_now["status"]["capacity"]["storage"] == "256Mi" else None

    grown_claim = await eventually(grown)
    assert (await admin.get(PVS, pv["metadata"]["name"]))["spec"]["capacity"]["storage"] == "256Mi"
    reasons = [reason for reason, _ in await events_of(admin, ns, "grow")]
    assert "VolumeResizeSuccessful" in reasons
    # The launcher grows the guest's disk.img to the new capacity (KubeVirt's offline disk expansion).
    await prepare_pvc_disk(image, grown_claim, overhead=0.0)
    assert image.stat().st_size == 256 * MI
    assert image.stat().st_blocks * 512 < MI  # still sparse

    # A class without expansion refuses to grow its claims.
    await admin.create(PVS, volume("st-fixed", directory.parent / "fixed", "64Mi", "fixed"))
    await admin.create(PVCS, claim("fixed", "64Mi", storageClassName="fixed"), ns)
    await wait_phase(admin, PVCS, "fixed", "Bound", ns)
    message = await invalid_message(
        admin.patch(PVCS, "fixed", {"spec": {"resources": {"requests": {"storage": "128Mi"}}}}, ns)
    )
    assert message.endswith(
        "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support "
        "resize"
    )


async def test_a_claim_larger_than_the_free_space_is_refused_with_an_event(
    cluster: KubeClient, storage_dir: Path
) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-full")
    await eventually(lambda: admin.get(STORAGE_CLASSES, "shared"))
    await admin.create(PVCS, claim("huge", "100Ti", storageClassName="shared", accessModes=["ReadWriteMany"]), ns)

    async def refused() -> str | None:
        for reason, message in await events_of(admin, ns, "huge"):
            if reason == "ProvisioningFailed":
                return message
        return None

    message = await eventually(refused)
    assert message.startswith(
        f'failed to provision volume with StorageClass "shared": not enough free space under {storage_dir}: '
        "the claim requests 109951162777600 bytes, "
    )
    assert await phase_of(admin, PVCS, "huge", ns) == "Pending"
    assert not any((storage_dir / "shared").glob(f"*_{ns}_huge"))


async def test_kubectl_prints_claims_and_volumes_as_kube(
    cluster: KubeClient, storage_server: APIServerProcess, tmp_path: Path
) -> None:
    admin = cluster
    ns = await new_namespace(admin, "st-print")
    await admin.create(PVS, volume("st-print-pv", tmp_path / "v", "2Gi", "manual-print"))
    await admin.create(PVCS, claim("shown", "1Gi", storageClassName="manual-print"), ns)
    await wait_phase(admin, PVCS, "shown", "Bound", ns)
    out = kubectl(storage_server, tmp_path, "get", "pvc", "-n", ns, "-o", "wide").stdout.splitlines()
    assert out[0].split() == [
        "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE",
        "VOLUMEMODE",
    ]  # fmt: skip
    row = out[1].split()
    assert row[:7] == ["shown", "Bound", "st-print-pv", "2Gi", "RWO", "manual-print", "<unset>"]
    assert row[-1] == "Filesystem"
    out = kubectl(storage_server, tmp_path, "get", "pv", "st-print-pv").stdout.splitlines()
    assert out[0].split() == [
        "NAME", "CAPACITY", "ACCESS", "MODES", "RECLAIM", "POLICY", "STATUS", "CLAIM", "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS", "REASON", "AGE",
    ]  # fmt: skip
    assert out[1].split()[:8] == [
        "st-print-pv",
        "2Gi",
        "RWO",
        "Retain",
        "Bound",
        f"{ns}/shown",
        "manual-print",
        "<unset>",
    ]
