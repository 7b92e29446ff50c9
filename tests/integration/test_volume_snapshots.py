"""CSI volume snapshots in the embedded cluster (external-snapshotter's API): snapshots taken with kubectl, restored
into new claims of both classes, deletion policies, the users' errors, against a real API server process with the
storage component (as virt-controller) and the scheduler running in-process on fake nodes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import volume_snapshot as vs
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import (
    EVENTS,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    VOLUME_SNAPSHOT_CLASSES,
    VOLUME_SNAPSHOT_CONTENTS,
    VOLUME_SNAPSHOTS,
)
from tests.integration.test_scheduler import node_manifest, pod_manifest
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.storage_plane import storage_on_fake_nodes
from tests.support.waiting import eventually

PVCS, PVS = PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
VSS, VSCS = VOLUME_SNAPSHOTS, VOLUME_SNAPSHOT_CONTENTS
MARKER_OFFSET = 4096


@pytest.fixture(scope="module")
def snapshot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("snapshot-apiserver") / "data").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def storage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("volumes")


@pytest.fixture
async def cluster(snapshot_server: APIServerProcess, storage_dir: Path) -> AsyncIterator[KubeClient]:
    """The storage component as virt-controller (its RBAC included), the scheduler, one schedulable fake node."""
    nodes = [node_manifest("n1", memory="16Gi")]
    async with storage_on_fake_nodes(snapshot_server, storage_dir, nodes, "virt-controller") as admin:
        yield admin


async def new_namespace(admin: KubeClient, name: str) -> str:
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def claim(name: str, size: str = "64Mi", class_name: str = "shared", snapshot: str = "", **spec: Any) -> Object:
    modes = ["ReadWriteMany"] if class_name == "shared" else ["ReadWriteOnce"]
    body: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": modes,
            "resources": {"requests": {"storage": size}},
            "storageClassName": class_name,
            **spec,
        },
    }
    if snapshot:
        body["spec"]["dataSource"] = {"apiGroup": vs.GROUP, "kind": "VolumeSnapshot", "name": snapshot}
    return body


def snapshot_manifest(name: str, pvc: str = "", class_name: str = "", content: str = "") -> Object:
    source = {"persistentVolumeClaimName": pvc} if pvc else {"volumeSnapshotContentName": content}
    spec: Object = {"source": source}
    if class_name:
        spec["volumeSnapshotClassName"] = class_name
    return {"apiVersion": vs.API_VERSION, "kind": "VolumeSnapshot", "metadata": {"name": name}, "spec": spec}


async def bound_dir(admin: KubeClient, ns: str, name: str) -> Path:
    async def bound() -> Object | None:
        pvc = await admin.get(PVCS, name, ns)
        return pvc if (pvc.get("status") or {}).get("phase") == "Bound" else None

    pvc = await eventually(bound, timeout=20)
    pv = await admin.get(PVS, pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"])


def write_marker(directory: Path, text: str) -> None:
    """A guest's disk.img on the host: sparse, with a marker past the first hole."""
    image = directory / "disk.img"
    with open(image, "r+b" if image.exists() else "wb") as handle:
        handle.truncate(16 * 1024 * 1024)
        handle.seek(MARKER_OFFSET)
        handle.write(text.encode())


def read_marker(directory: Path, length: int = 3) -> str:
    with open(directory / "disk.img", "rb") as handle:
        handle.seek(MARKER_OFFSET)
        return handle.read(length).decode()


async def ready_snapshot(admin: KubeClient, ns: str, name: str) -> Object:
    async def ready() -> Object | None:
        snapshot = await admin.get(VSS, name, ns)
        return snapshot if (snapshot.get("status") or {}).get("readyToUse") is True else None

    return await eventually(ready, timeout=20)


async def snapshot_error(admin: KubeClient, ns: str, name: str, text: str) -> Object:
    async def failed() -> Object | None:
        snapshot = await admin.get(VSS, name, ns)
        message = ((snapshot.get("status") or {}).get("error") or {}).get("message") or ""
        return snapshot if message == text else None

    return await eventually(failed, timeout=20)


async def events_of(admin: KubeClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    items = (await admin.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}"))["items"]
    return [(str(e.get("type")), str(e.get("reason")), str(e.get("message"))) for e in items]


async def has_event(admin: KubeClient, namespace: str, name: str, event: tuple[str, str, str]) -> None:
    async def seen() -> bool:
        return event in await events_of(admin, namespace, name)

    await eventually(seen, timeout=20)


async def gone(admin: KubeClient, resource: Any, name: str, namespace: str | None = None) -> None:
    async def absent() -> bool:
        try:
            await admin.get(resource, name, namespace)
        except NotFound:
            return True
        return False

    await eventually(absent, timeout=20)


async def test_snapshot_with_kubectl_then_restore_and_delete(
    cluster: KubeClient, snapshot_server: APIServerProcess, storage_dir: Path, tmp_path: Path
) -> None:
    admin = cluster
    ns = await new_namespace(admin, "vs-shared")
    default = await eventually(lambda: admin.get(VOLUME_SNAPSHOT_CLASSES, "local-snapshots"))
    assert default["driver"] == "pykubevirt.io/local-path" and default["deletionPolicy"] == "Delete"
    assert default["metadata"]["annotations"] == {"snapshot.storage.kubernetes.io/is-default-class": "true"}
    await admin.create(PVCS, claim("source"), ns)
    source_dir = await bound_dir(admin, ns, "source")
    write_marker(source_dir, "OLD")

    # kubectl, as a user would: no class named, so the default class of the volume's driver is set in the spec.
    manifest = json.dumps(snapshot_manifest("snap", pvc="source"))
    kubectl(snapshot_server, tmp_path, "apply", "-n", ns, "-f", "-", stdin=manifest)
    snapshot = await ready_snapshot(admin, ns, "snap")
    assert snapshot["spec"]["volumeSnapshotClassName"] == "local-snapshots"
    content_name = f"snapcontent-{snapshot['metadata']['uid']}"
    assert snapshot["status"]["boundVolumeSnapshotContentName"] == content_name
    assert snapshot["status"]["restoreSize"] == "64Mi"
    assert snapshot["status"]["creationTime"].endswith("Z")
    assert "error" not in snapshot["status"]
    assert set(snapshot["metadata"]["finalizers"]) == {vs.AS_SOURCE_FINALIZER, vs.BOUND_FINALIZER}
    content = await admin.get(VSCS, content_name)
    ref = content["spec"]["volumeSnapshotRef"]
    assert (ref["kind"], ref["name"], ref["namespace"], ref["uid"]) == (
        "VolumeSnapshot",
        "snap",
        ns,
        snapshot["metadata"]["uid"],
    )
    source_pvc = await admin.get(PVCS, "source", ns)
    assert content["spec"]["source"] == {"volumeHandle": source_pvc["spec"]["volumeName"]}
    assert content["spec"]["driver"] == "pykubevirt.io/local-path"
    assert content["spec"]["deletionPolicy"] == "Delete"
    assert content["spec"]["volumeSnapshotClassName"] == "local-snapshots"
    assert content["status"]["readyToUse"] is True
    assert content["status"]["restoreSize"] == 64 * 1024 * 1024
    assert isinstance(content["status"]["creationTime"], int) and content["status"]["creationTime"] > 10**18
    assert content["metadata"]["finalizers"] == [vs.CONTENT_FINALIZER]
    data = storage_dir / "snapshots" / content["status"]["snapshotHandle"]
    assert read_marker(data) == "OLD"
    assert (data / "disk.img").stat().st_blocks * 512 < 1024 * 1024  # the copy kept the holes
    # The claim's finalizer was only for the time the snapshot was taken.
    assert vs.PVC_FINALIZER not in (await admin.get(PVCS, "source", ns))["metadata"]["finalizers"]
    await has_event(admin, ns, "snap", ("Normal", "SnapshotReady", f"Snapshot {ns}/snap is ready to use."))

    printed = kubectl(snapshot_server, tmp_path, "get", "vs", "-n", ns).stdout.splitlines()
    assert printed[0].split() == [
        "NAME",
        "READYTOUSE",
        "SOURCEPVC",
        "SOURCESNAPSHOTCONTENT",
        "RESTORESIZE",
        "SNAPSHOTCLASS",
        "SNAPSHOTCONTENT",
        "CREATIONTIME",
        "AGE",
    ]
    assert printed[1].split()[:6] == ["snap", "true", "source", "64Mi", "local-snapshots", content_name]
    assert "local-snapshots" in kubectl(snapshot_server, tmp_path, "get", "vsclass").stdout
    assert content_name in kubectl(snapshot_server, tmp_path, "get", "vsc").stdout

    # The original changes; a claim restored from the snapshot has the old data.
    write_marker(source_dir, "NEW")
    await admin.create(PVCS, claim("restored", snapshot="snap"), ns)
    assert read_marker(await bound_dir(admin, ns, "restored")) == "OLD"
    # A claim smaller than the snapshot is refused by the provisioner, and stays Pending.
    await admin.create(PVCS, claim("small", "32Mi", snapshot="snap"), ns)
    message = (
        'failed to provision volume with StorageClass "shared": error getting handle for DataSource Type '
        "VolumeSnapshot by Name snap: requested volume size 33554432 is less than the size 67108864 for the source "
        "snapshot snap"
    )
    await has_event(admin, ns, "small", ("Warning", "ProvisioningFailed", message))
    assert (await admin.get(PVCS, "small", ns))["status"]["phase"] == "Pending"
    # A Pending claim restoring from it holds the snapshot's deletion back; once it is gone, Delete cleans up.
    await admin.delete(VSS, "snap", ns)
    pending = ("Warning", "SnapshotDeletePending", "Snapshot is being used to restore a PVC")
    await has_event(admin, ns, "snap", pending)
    await admin.delete(PVCS, "small", ns)
    await gone(admin, VSS, "snap", ns)
    await gone(admin, VSCS, content_name)
    assert not data.exists()
    assert read_marker(await bound_dir(admin, ns, "restored")) == "OLD"


async def test_local_class_restore_and_retain_policy(cluster: KubeClient, storage_dir: Path) -> None:
    admin = cluster
    ns = await new_namespace(admin, "vs-local")
    retain = {
        "apiVersion": vs.API_VERSION,
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "keep"},
        "driver": "pykubevirt.io/local-path",
        "deletionPolicy": "Retain",
    }
    await admin.create(VOLUME_SNAPSHOT_CLASSES, retain)
    await admin.create(PVCS, claim("disk", class_name="local"), ns)
    volumes = [{"name": "disk", "persistentVolumeClaim": {"claimName": "disk"}}]
    pod = pod_manifest("user", volumes=volumes)
    pod["metadata"]["namespace"] = ns
    await admin.create(PODS, pod, ns)
    write_marker(await bound_dir(admin, ns, "disk"), "ONE")
    await admin.create(VSS, snapshot_manifest("kept", pvc="disk", class_name="keep"), ns)
    snapshot = await ready_snapshot(admin, ns, "kept")
    # Retain: no bound finalizer, the content and its data outlive the snapshot.
    assert snapshot["metadata"]["finalizers"] == [vs.AS_SOURCE_FINALIZER]
    content_name = snapshot["status"]["boundVolumeSnapshotContentName"]

    # WaitForFirstConsumer: the restored volume is made (and filled) when a pod using it is scheduled.
    await admin.create(PVCS, claim("copy", class_name="local", snapshot="kept"), ns)
    pod = pod_manifest("reader", volumes=[{"name": "copy", "persistentVolumeClaim": {"claimName": "copy"}}])
    pod["metadata"]["namespace"] = ns
    await admin.create(PODS, pod, ns)
    copy_dir = await bound_dir(admin, ns, "copy")
    assert copy_dir.parent == storage_dir / "n1"
    assert read_marker(copy_dir) == "ONE"

    await admin.delete(VSS, "kept", ns)
    await gone(admin, VSS, "kept", ns)
    content = await admin.get(VSCS, content_name)
    data = storage_dir / "snapshots" / content["status"]["snapshotHandle"]
    assert content["metadata"]["annotations"][vs.BEING_DELETED_ANNOTATION] == "yes"
    assert read_marker(data) == "ONE"
    # The retained data, pre-provisioned by hand: a content naming its handle, a snapshot naming the content.
    static: Object = {
        "apiVersion": vs.API_VERSION,
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": "static-content"},
        "spec": {
            "source": {"snapshotHandle": content["status"]["snapshotHandle"]},
            "driver": "pykubevirt.io/local-path",
            "deletionPolicy": "Retain",
            "volumeSnapshotRef": {"name": "static", "namespace": ns},
        },
    }
    await admin.create(VSCS, static)
    await admin.create(VSS, snapshot_manifest("static", content="static-content"), ns)
    snapshot = await ready_snapshot(admin, ns, "static")
    assert snapshot["status"]["boundVolumeSnapshotContentName"] == "static-content"
    assert snapshot["status"]["restoreSize"] == "16Mi"
    bound = await admin.get(VSCS, "static-content")
    assert bound["spec"]["volumeSnapshotRef"]["uid"] == snapshot["metadata"]["uid"]
    await admin.create(PVCS, claim("from-static", snapshot="static"), ns)
    assert read_marker(await bound_dir(admin, ns, "from-static")) == "ONE"
    await admin.delete(PVCS, "from-static", ns)
    await admin.delete(VSS, "static", ns)
    await gone(admin, VSS, "static", ns)
    await admin.delete(VSCS, "static-content")
    await gone(admin, VSCS, "static-content")
    assert read_marker(data) == "ONE"
    # Deleting the retained content keeps the data; a content with policy Delete takes its data along.
    await admin.patch(VSCS, content_name, {"spec": {"deletionPolicy": "Delete"}})
    await admin.delete(VSCS, content_name)
    await gone(admin, VSCS, content_name)
    assert not data.exists()


async def test_errors_users_see_and_retries(cluster: KubeClient) -> None:
    admin = cluster
    ns = await new_namespace(admin, "vs-errors")
    # The CRDs' rules (CEL upstream) with their messages.
    with pytest.raises(ApiError) as caught:
        bad = snapshot_manifest("both", pvc="a")
        bad["spec"]["source"]["volumeSnapshotContentName"] = "b"
        await admin.create(VSS, bad, ns)
    assert caught.value.message == (
        'VolumeSnapshot.snapshot.storage.k8s.io "both" is invalid: spec.source: Invalid value: "object": '
        "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"
    )

    # A claim that does not exist yet: an error, retried until it exists and is bound.
    await admin.create(VSS, snapshot_manifest("early", pvc="later", class_name="local-snapshots"), ns)
    text = (
        "Failed to create snapshot content with error snapshot controller failed to update early on API server: "
        "cannot get claim from snapshot"
    )
    await snapshot_error(admin, ns, "early", text)
    await has_event(admin, ns, "early", ("Warning", "SnapshotContentCreationFailed", text))
    with pytest.raises(ApiError) as caught:
        await admin.patch(VSS, "early", {"spec": {"source": {"persistentVolumeClaimName": "other"}}}, ns)
    assert caught.value.message.endswith(
        'spec.source.persistentVolumeClaimName: Invalid value: "string": persistentVolumeClaimName is immutable'
    )
    await admin.create(PVCS, claim("later"), ns)
    ready = await ready_snapshot(admin, ns, "early")
    assert "error" not in ready["status"]

    # No class and an unbound (WaitForFirstConsumer) claim: no default class can be found for it yet.
    await admin.create(PVCS, claim("idle", class_name="local"), ns)
    await admin.create(VSS, snapshot_manifest("unbound", pvc="idle"), ns)
    text = (
        "Failed to set default snapshot class with error the PVC idle is not yet bound to a PV, will not attempt to "
        "take a snapshot"
    )
    await snapshot_error(admin, ns, "unbound", text)
    await has_event(admin, ns, "unbound", ("Warning", "SetDefaultSnapshotClassFailed", text))
    # A class that does not exist.
    await admin.create(VSS, snapshot_manifest("classless", pvc="later", class_name="nope"), ns)
    text = 'Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io "nope" not found'
    await snapshot_error(admin, ns, "classless", text)
    # A named class with an unbound claim: the claim is protected while the snapshot waits, and released after.
    await admin.create(VSS, snapshot_manifest("waiting", pvc="idle", class_name="local-snapshots"), ns)
    text = (
        "Failed to create snapshot content with error failed to get input parameters to create snapshot waiting: "
        '"the PVC idle is not yet bound to a PV, will not attempt to take a snapshot"'
    )
    await snapshot_error(admin, ns, "waiting", text)
    assert vs.PVC_FINALIZER in (await admin.get(PVCS, "idle", ns))["metadata"]["finalizers"]

    # A claim restored from a snapshot that is not ready stays Pending, with the provisioner's reason.
    await admin.create(PVCS, claim("from-waiting", snapshot="waiting"), ns)
    message = (
        'failed to provision volume with StorageClass "shared": error getting handle for DataSource Type '
        "VolumeSnapshot by Name waiting: snapshot waiting not bound"
    )
    await has_event(admin, ns, "from-waiting", ("Warning", "ProvisioningFailed", message))
    await admin.create(PVCS, claim("from-missing", snapshot="missing"), ns)
    message = (
        'failed to provision volume with StorageClass "shared": error getting handle for DataSource Type '
        "VolumeSnapshot by Name missing: error getting snapshot missing from api server: "
        'volumesnapshots.snapshot.storage.k8s.io "missing" not found'
    )
    await has_event(admin, ns, "from-missing", ("Warning", "ProvisioningFailed", message))
    assert (await admin.get(PVCS, "from-missing", ns))["status"]["phase"] == "Pending"

    # Pre-provisioned: a content that does not exist is an error; nothing is left stuck by any of these.
    await admin.create(VSS, snapshot_manifest("static", content="absent"), ns)
    await snapshot_error(admin, ns, "static", "VolumeSnapshotContent is missing")
    await admin.delete(PVCS, "from-waiting", ns)
    await admin.delete(PVCS, "from-missing", ns)
    for name in ("early", "unbound", "classless", "waiting", "static"):
        await admin.delete(VSS, name, ns)
    for name in ("early", "unbound", "classless", "waiting", "static"):
        await gone(admin, VSS, name, ns)
    assert vs.PVC_FINALIZER not in (await admin.get(PVCS, "idle", ns))["metadata"]["finalizers"]
    await gone(admin, VSCS, f"snapcontent-{ready['metadata']['uid']}")
