"""The snapshot.storage.k8s.io/v1 model (CRDs, the CEL rules' checks, names) and the snapshotter's pure parts:
the content it makes, a restore's source checks, the provisioner's sparse copies."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pykubevirt.api import volume_snapshot as vs
from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.errors import APIError
from pykubevirt.api.structural import structural_violations, validate
from pykubevirt.storage.local_provisioner import LocalPathProvisioner, ProvisioningError, default_snapshot_classes
from pykubevirt.storage.volume_snapshot_controller import new_content, restore_source

NS = "ns"


def snapshot(source: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": vs.API_VERSION,
        "kind": "VolumeSnapshot",
        "metadata": {"name": "snap", "namespace": NS, "uid": "u-1", "resourceVersion": "7"},
        "spec": {"source": source},
        "status": status,
    }


def test_crds_have_upstream_names_columns_and_structural_schemas() -> None:
    crds = {spec.kind: crd_manifest(spec) for spec in vs.SNAPSHOT_KINDS}
    assert {kind: crd["metadata"]["name"] for kind, crd in crds.items()} == {
        "VolumeSnapshotClass": "volumesnapshotclasses.snapshot.storage.k8s.io",
        "VolumeSnapshot": "volumesnapshots.snapshot.storage.k8s.io",
        "VolumeSnapshotContent": "volumesnapshotcontents.snapshot.storage.k8s.io",
    }
    assert crds["VolumeSnapshot"]["spec"]["names"]["shortNames"] == ["vs"]
    assert crds["VolumeSnapshotContent"]["spec"]["names"]["shortNames"] == ["vsc", "vscs"]
    assert crds["VolumeSnapshotClass"]["spec"]["names"]["shortNames"] == ["vsclass", "vsclasses"]
    assert [crd["spec"]["scope"] for crd in crds.values()] == ["Cluster", "Namespaced", "Cluster"]
    version = crds["VolumeSnapshot"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert "subresources" not in crds["VolumeSnapshotClass"]["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "ReadyToUse",
        "SourcePVC",
        "SourceSnapshotContent",
        "RestoreSize",
        "SnapshotClass",
        "SnapshotContent",
        "CreationTime",
        "Age",
    ]
    for spec in vs.SNAPSHOT_KINDS:
        assert structural_violations(spec.schema) == []


def test_schemas_require_what_upstream_requires() -> None:
    found = validate({"driver": "d", "deletionPolicy": "Keep"}, vs.VOLUME_SNAPSHOT_CLASS_SCHEMA)
    assert [e.message for e in found] == [
        'deletionPolicy: Unsupported value: "Keep": supported values: "Delete", "Retain"'
    ]
    found = validate({"spec": {}}, vs.VOLUME_SNAPSHOT_CONTENT_SCHEMA)
    assert sorted(e.field for e in found) == [
        "spec.deletionPolicy",
        "spec.driver",
        "spec.source",
        "spec.volumeSnapshotRef",
    ]
    assert [e.field for e in validate({"spec": {}}, vs.VOLUME_SNAPSHOT_SCHEMA)] == ["spec.source"]


def test_snapshot_rules_with_upstream_messages() -> None:
    both = snapshot({"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"})
    assert [c.message for c in vs.snapshot_causes(both)] == [
        'Invalid value: "object": exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set'
    ]
    assert [c.field for c in vs.snapshot_causes(snapshot({}))] == ["spec.source"]
    old = snapshot({"persistentVolumeClaimName": "a"})
    changed = vs.snapshot_causes(snapshot({"persistentVolumeClaimName": "b"}), old)
    assert [(c.field, c.message) for c in changed] == [
        (
            "spec.source.persistentVolumeClaimName",
            'Invalid value: "string": persistentVolumeClaimName is immutable',
        )
    ]
    swapped = vs.snapshot_causes(snapshot({"volumeSnapshotContentName": "c"}), old)
    assert [c.message for c in swapped] == ['Invalid value: "object": persistentVolumeClaimName is required once set']
    empty_class = snapshot({"persistentVolumeClaimName": "a"})
    empty_class["spec"]["volumeSnapshotClassName"] = ""
    assert [c.message for c in vs.snapshot_causes(empty_class)] == [
        'Invalid value: "string": volumeSnapshotClassName must not be the empty string when set'
    ]
    assert vs.snapshot_causes(old, old) == []


def test_content_rules_with_upstream_messages() -> None:
    content = {"spec": {"source": {}, "volumeSnapshotRef": {"name": "s"}}}
    assert [(c.field, c.message) for c in vs.content_causes(content)] == [
        ("spec.source", 'Invalid value: "object": exactly one of volumeHandle and snapshotHandle must be set'),
        (
            "spec.volumeSnapshotRef",
            'Invalid value: "object": both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace '
            "must be set",
        ),
    ]
    old = {"spec": {"source": {"snapshotHandle": "h"}, "sourceVolumeMode": "Block"}}
    new = {"spec": {"source": {"snapshotHandle": "g"}}}
    assert [c.message for c in vs.content_causes(new, old)] == [
        'Invalid value: "object": sourceVolumeMode is required once set',
        'Invalid value: "string": snapshotHandle is immutable',
    ]


def test_admission_plugin_raises_invalid_and_ratchets() -> None:
    plugin = vs.SnapshotValidation()
    resource = SimpleNamespace(group=vs.GROUP, kind="VolumeSnapshot", builtin=False)
    ctx = SimpleNamespace(subresource="")
    assert plugin.handles(resource)
    assert not plugin.handles(SimpleNamespace(group="", kind="Pod", builtin=True))
    bad = snapshot({})
    with pytest.raises(APIError) as caught:
        plugin.validate(resource, "CREATE", bad, None, ctx)
    assert caught.value.code == 422
    assert str(caught.value.message) == (
        'VolumeSnapshot.snapshot.storage.k8s.io "snap" is invalid: spec.source: Invalid value: "object": '
        "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"
    )
    # A write that leaves the spec alone (status, finalizers) is not checked again.
    assert plugin.validate(resource, "UPDATE", bad, snapshot({}), ctx) == []


def test_names_quantities_and_data_sources() -> None:
    assert vs.content_name_for(snapshot({})) == "snapcontent-u-1"
    assert vs.restore_size_quantity(64 * 1024 * 1024) == "64Mi"
    assert vs.restore_size_quantity(1000000) == "1000000"
    assert vs.restore_size_quantity(1000) == "1k"  # below 1024 a BinarySI quantity prints as DecimalSI
    pvc = {"spec": {"dataSourceRef": {"apiGroup": vs.GROUP, "kind": "VolumeSnapshot", "name": "s"}}}
    assert vs.snapshot_data_source(pvc) == "s"
    assert vs.snapshot_data_source({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "p"}}}) == ""
    assert vs.go_quote('persistentvolumeclaim "p" not found') == '"persistentvolumeclaim \\"p\\" not found"'
    (default,) = default_snapshot_classes()
    assert default["metadata"] == {
        "name": "local-snapshots",
        "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
    }
    assert vs.is_default_class(default)


def test_new_content_is_what_the_snapshot_controller_creates() -> None:
    snapshot_class = {"metadata": {"name": "c"}, "driver": "pykubevirt.io/local-path", "deletionPolicy": "Retain"}
    content = new_content(snapshot({"persistentVolumeClaimName": "p"}), snapshot_class, "pvc-1")
    assert content["metadata"] == {"name": "snapcontent-u-1"}
    assert content["spec"] == {
        "volumeSnapshotRef": {
            "apiVersion": vs.API_VERSION,
            "kind": "VolumeSnapshot",
            "name": "snap",
            "namespace": NS,
            "uid": "u-1",
            "resourceVersion": "7",
        },
        "source": {"volumeHandle": "pvc-1"},
        "volumeSnapshotClassName": "c",
        "deletionPolicy": "Retain",
        "driver": "pykubevirt.io/local-path",
    }


class Store:
    def __init__(self, *items: dict[str, Any]) -> None:
        self.items = {
            (f"{i['metadata']['namespace']}/" if i["metadata"].get("namespace") else "") + i["metadata"]["name"]: i
            for i in items
        }

    def get(self, key: str) -> dict[str, Any] | None:
        return self.items.get(key)


def restore_claim(size: str) -> dict[str, Any]:
    source = {"apiGroup": vs.GROUP, "kind": "VolumeSnapshot", "name": "snap"}
    return {
        "metadata": {"name": "r", "namespace": NS},
        "spec": {"dataSource": source, "resources": {"requests": {"storage": size}}},
    }


def test_restore_source_checks_as_external_provisioner(tmp_path: Path) -> None:
    provisioner = LocalPathProvisioner(tmp_path)
    sc = {"provisioner": "pykubevirt.io/local-path"}
    content = {
        "metadata": {"name": "snapcontent-u-1"},
        "spec": {"driver": "pykubevirt.io/local-path", "volumeSnapshotRef": {"name": "snap", "uid": "u-1"}},
        "status": {"snapshotHandle": "snapcontent-u-1"},
    }
    prefix = "error getting handle for DataSource Type VolumeSnapshot by Name snap: "

    def message(snap: dict[str, Any] | None, size: str = "1Gi") -> str:
        snapshots = Store(snap) if snap else Store()
        with pytest.raises(ProvisioningError) as caught:
            restore_source(restore_claim(size), sc, snapshots, Store(content), provisioner)  # type: ignore[arg-type]
        return str(caught.value).removeprefix(prefix)

    assert message(None) == (
        'error getting snapshot snap from api server: volumesnapshots.snapshot.storage.k8s.io "snap" not found'
    )
    assert message(snapshot({})) == "snapshot snap not bound"
    bound = snapshot({}, boundVolumeSnapshotContentName="snapcontent-u-1", readyToUse=False)
    assert message(bound) == "snapshot snap is not Ready"
    ready = snapshot({}, boundVolumeSnapshotContentName="snapcontent-u-1", readyToUse=True, restoreSize="1Gi")
    assert message(ready, "512Mi") == (
        "requested volume size 536870912 is less than the size 1073741824 for the source snapshot snap"
    )
    found = restore_source(restore_claim("2Gi"), sc, Store(ready), Store(content), provisioner)  # type: ignore[arg-type]
    assert found == tmp_path / "snapshots" / "snapcontent-u-1"
    assert restore_source({"metadata": {}, "spec": {}}, sc, Store(), Store(), provisioner) is None  # type: ignore[arg-type]


def write_image(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)
        handle.seek(8192)
        handle.write(b"mark")


def read_mark(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(8192)
        return handle.read(4)


async def test_snapshot_copy_is_sparse_and_restores_block_and_filesystem(tmp_path: Path) -> None:
    provisioner = LocalPathProvisioner(tmp_path)
    volume_dir = tmp_path / "n1" / "pvc-1_ns_disk"
    volume_dir.mkdir(parents=True)
    write_image(volume_dir / "disk.img", 64 * 1024 * 1024)
    pv = {"metadata": {"name": "pvc-1"}, "spec": {"hostPath": {"path": str(volume_dir)}}}
    await provisioner.create_snapshot(pv, "snapcontent-a")
    copied = tmp_path / "snapshots" / "snapcontent-a" / "disk.img"
    assert copied.stat().st_size == 64 * 1024 * 1024
    assert copied.stat().st_blocks * 512 < 1024 * 1024
    assert not list((tmp_path / "snapshots").glob(".*"))
    assert provisioner.snapshot_size("snapcontent-a") == 64 * 1024 * 1024
    with pytest.raises(ProvisioningError):
        provisioner.snapshot_dir("../escape")

    # A block claim restored from a filesystem volume's snapshot gets the image as its block.img, grown to size.
    block_claim = {
        "metadata": {"name": "b", "namespace": "ns", "uid": "u-b"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Block",
            "resources": {"requests": {"storage": "128Mi"}},
        },
    }
    shared = {"metadata": {"name": "shared"}, "parameters": {"shared": "true"}}
    restored = await provisioner.provision(block_claim, shared, "", tmp_path / "snapshots" / "snapcontent-a")
    block = Path(restored["spec"]["hostPath"]["path"])
    assert block.name == "block.img" and block.stat().st_size == 128 * 1024 * 1024
    assert read_mark(block) == b"mark"
    await provisioner.delete_snapshot("snapcontent-a")
    assert not (tmp_path / "snapshots" / "snapcontent-a").exists()
