"""Kubernetes' storage rules as pure functions: PV/PVC/StorageClass validation, which volume a claim binds, and the
sizes KubeVirt gives a PVC's disk.img."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import storage_validation as sv
from pykubevirt.api import volume_binding as vb
from pykubevirt.api.quantity import MI
from pykubevirt.launcher.pvc_disks import (
    PVCDiskError,
    claim_disk_capacity,
    creation_size,
    possible_guest_size,
)


def pvc(size: str = "1Gi", modes: tuple[str, ...] = ("ReadWriteOnce",), **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, **spec},
    }


def pv(name: str, size: str, modes: tuple[str, ...] = ("ReadWriteOnce",), **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", {})
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"accessModes": list(modes), "capacity": {"storage": size}, "hostPath": {"path": "/x"}, **extra},
        "status": {"phase": "Available"},
    }


def messages(causes: list[Any]) -> list[str]:
    return [f"{c.field}: {c.message}" for c in causes]


def test_claim_validation_messages() -> None:
    assert messages(sv.validate_pvc(pvc(modes=()))) == [
        "spec.accessModes: Required value: at least 1 access mode is required"
    ]
    assert messages(sv.validate_pvc(pvc(modes=("ReadWriteOncePod", "ReadWriteOnce")))) == [
        "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"
    ]
    assert messages(sv.validate_pvc(pvc(size="0"))) == [
        'spec.resources[storage]: Invalid value: "0": must be greater than zero'
    ]
    assert messages(sv.validate_pvc(pvc(volumeMode="Raw"))) == [
        'spec.volumeMode: Unsupported value: "Raw": supported values: "Block", "Filesystem"'
    ]


def test_claim_updates_only_grow_a_bound_claim() -> None:
    old = pvc("1Gi")
    old["status"] = {"phase": "Bound", "capacity": {"storage": "1Gi"}}
    assert sv.validate_pvc_update(pvc("2Gi"), old) == []
    unbound = pvc("1Gi")
    assert messages(sv.validate_pvc_update(pvc("2Gi"), unbound))[0].startswith(
        "spec: Forbidden: spec is immutable after creation"
    )
    # Binding records spec.volumeName: not a user's change.
    assert sv.validate_pvc_update(pvc("1Gi", volumeName="pv1"), unbound) == []
    assert messages(sv.validate_pvc_update(pvc("512Mi"), old)) == [
        "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
    ]


def test_volume_and_class_validation_messages() -> None:
    both = pv("p", "1Gi", local={"path": "/y"})
    assert messages(sv.validate_pv(both)) == [
        "spec.local: Forbidden: may not specify more than 1 volume type",
        "spec.nodeAffinity: Required value: Local volume requires node affinity",
    ]
    assert messages(sv.validate_pv(pv("p", "1Gi", persistentVolumeReclaimPolicy="Keep"))) == [
        'spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep": supported values: "Delete", "Recycle", "Retain"'
    ]
    sc = {"provisioner": "a.io/b", "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"}
    assert sv.validate_storage_class(sc) == []
    assert messages(sv.validate_storage_class_update(dict(sc, volumeBindingMode="WaitForFirstConsumer"), sc)) == [
        'volumeBindingMode: Invalid value: "WaitForFirstConsumer": field is immutable'
    ]


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        (pvc("1Gi"), "small"),  # the smallest that fits
        (pvc("3Gi"), "big"),
        (pvc("1Gi", modes=("ReadWriteMany",)), "rwx"),  # access modes must all be offered
        (pvc("1Gi", selector={"matchLabels": {"tier": "gold"}}), "gold"),
        (pvc("1Gi", volumeMode="Block"), "block"),  # the volume mode must match
        (pvc("1Gi", storageClassName="fast"), "fast"),  # so must the class
        (pvc("100Gi"), None),
    ],
)
def test_find_matching_volume(claim: dict[str, Any], expected: str | None) -> None:
    volumes = [
        pv("big", "4Gi"),
        pv("small", "2Gi"),
        pv("rwx", "8Gi", ("ReadWriteOnce", "ReadWriteMany")),
        pv("gold", "10Gi", labels={"tier": "gold"}),
        pv("block", "10Gi", volumeMode="Block"),
        pv("fast", "10Gi", storageClassName="fast"),
        pv("taken", "1Gi", claimRef={"namespace": "other", "name": "x", "uid": "u9"}),
    ]
    found = vb.find_matching_volume(claim, volumes)
    assert (found["metadata"]["name"] if found else None) == expected


def test_a_volume_pre_bound_to_the_claim_wins_and_node_affinity_filters() -> None:
    mine = pv("mine", "10Gi", claimRef={"namespace": "ns", "name": "c"})
    assert vb.find_matching_volume(pvc("1Gi"), [pv("small", "1Gi"), mine]) is mine
    on_n2 = pv("n2", "1Gi", nodeAffinity=vb.hostname_affinity("n2"))
    assert vb.find_matching_volume(pvc("1Gi"), [on_n2], lambda v: "n1" in str(v["spec"]["nodeAffinity"])) is None


def test_default_class_is_the_newest_marked_one() -> None:
    def sc(name: str, created: str, default: bool) -> dict[str, Any]:
        annotations = {vb.DEFAULT_CLASS_ANNOTATIONS[0]: "true"} if default else {}
        return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations}}

    classes = [sc("a", "2026-01-01T00:00:00Z", True), sc("b", "2026-02-01T00:00:00Z", True), sc("c", "2027", False)]
    assert vb.default_class(classes) == classes[1]
    assert vb.default_class([classes[2]]) is None


def test_disk_img_sizes_follow_kubevirt() -> None:
    # The request unless the capacity is known and smaller; aligned down to 1 MiB.
    assert claim_disk_capacity("v", {"storage": "2Gi"}, {"storage": "1Gi"}) == 1024 * MI
    assert claim_disk_capacity("v", {"storage": "1000Mi"}, {"storage": "1Gi"}) == 1000 * MI
    assert claim_disk_capacity("v", None, {"storage": "1500000000"}) == 1430 * MI
    with pytest.raises(PVCDiskError, match="must be at least 1MiB"):
        claim_disk_capacity("v", None, {"storage": "1000Ki"})
    with pytest.raises(PVCDiskError, match="provides no storage capacity or requests"):
        claim_disk_capacity("v", None, None)
    # Short of space: within 10 % the available space is used (ToleratedSmallPV), beyond it creation fails.
    assert creation_size(Path("d"), 100 * MI, 200 * MI) == (100 * MI, "")
    size, message = creation_size(Path("d"), 100 * MI, 95 * MI)
    assert size == 95 * MI
    assert message == (
        f"PV size too small: expected {100 * MI} B, found {95 * MI} B. Using it anyway, it is within 10 % toleration"
    )
    with pytest.raises(PVCDiskError, match="not enough space, demanded size"):
        creation_size(Path("d"), 100 * MI, 80 * MI)
    # The guest's share of a grown claim after the filesystem overhead.
    assert possible_guest_size(10 * 1024 * MI, 0.055) == 9676 * MI


def test_volume_status_has_every_volume_and_what_is_known_of_claims() -> None:
    from pykubevirt.controller.volume_status import volume_statuses

    vmi = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "volumes": [
                {"name": "root", "dataVolume": {"name": "dv"}},
                {"name": "cidata", "cloudInitNoCloud": {"userData": "x"}},
                {"name": "gone", "persistentVolumeClaim": {"claimName": "missing"}},
            ]
        },
        "status": {"volumeStatus": [{"name": "cidata", "target": "vdb"}]},
    }
    claim = pvc("2Gi")
    claim["metadata"] = {"name": "dv", "annotations": {"cdi.kubevirt.io/storage.preallocation.requested": "true"}}
    claim["status"] = {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"]}
    found = volume_statuses(vmi, {"ns/dv": claim}.get)
    assert found == [
        {"name": "cidata", "target": "vdb"},
        {"name": "gone", "target": ""},
        {
            "name": "root",
            "target": "",
            "persistentVolumeClaimInfo": {
                "claimName": "dv",
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "capacity": {"storage": "2Gi"},
                "requests": {"storage": "2Gi"},
                "filesystemOverhead": "0.055",
                "preallocated": True,
            },
        },
    ]


async def test_host_disks_are_created_sparse_only_for_disk_or_create(tmp_path: Path) -> None:
    from pykubevirt.launcher.pvc_disks import prepare_host_disk

    with pytest.raises(PVCDiskError, match="does not exist"):
        await prepare_host_disk(tmp_path / "a.img", "Disk", None)
    await prepare_host_disk(tmp_path / "b.img", "DiskOrCreate", "10Mi")
    assert (tmp_path / "b.img").stat().st_size == 10 * MI
    assert (tmp_path / "b.img").stat().st_blocks * 512 < MI


def test_cdi_sizes_and_claims_of_data_volumes() -> None:
    from pykubevirt.storage import datavolume_claim as dvc

    # CDI's own example: a 10Gi filesystem DataVolume asks for 11381663335 bytes; the image then gets 10Gi back.
    assert dvc.required_space(10 * 1024 * MI, 0.06) == 11381663335
    assert dvc.usable_space(11381663335, 0.06) == 10 * 1024 * MI
    dv = {
        "metadata": {"name": "d", "namespace": "ns", "uid": "u"},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }
    claim = dvc.new_claim(dv)
    assert claim["spec"] == {
        "resources": {"requests": {"storage": str(dvc.required_space(1024 * MI, 0.06))}},
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    }
    assert claim["metadata"]["annotations"]["cdi.kubevirt.io/storage.import.source"] == "none"
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "DataVolume"
    pod = dvc.importer_pod(dict(claim, metadata=dict(claim["metadata"], uid="pvc-uid")), dv)
    assert pod["metadata"]["name"] == "importer-d"
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    with pytest.raises(dvc.ClaimSpecError, match="datavolume one of"):
        dvc.claim_spec({"spec": {"source": {"blank": {}}}})
    with pytest.raises(dvc.ClaimSpecError, match="at least 1MiB"):
        dvc.claim_spec({"spec": {"storage": {"resources": {"requests": {"storage": "1Ki"}}}}})
    # spec.pvc is used as written, never inflated.
    assert dvc.claim_spec({"spec": {"pvc": {"resources": {"requests": {"storage": "1Gi"}}}}}) == {
        "resources": {"requests": {"storage": "1Gi"}}
    }
    # A clone without a size takes its source claim's request as it is (it holds the overhead already); without a
    # known source size, or for anything but a clone, a size is required.
    clone = {"spec": {"source": {"pvc": {"name": "golden"}}, "storage": {}}}
    assert dvc.claim_spec(clone, "68Mi")["resources"] == {"requests": {"storage": "68Mi"}}
    for sizeless, source_request in ((clone, ""), ({"spec": {"source": {"blank": {}}, "storage": {}}}, "68Mi")):
        with pytest.raises(dvc.ClaimSpecError, match="missing storage size"):
            dvc.claim_spec(sizeless, source_request)


@pytest.mark.parametrize(
    ("pvc_phase", "pod_phase", "source", "expected"),
    [
        (None, None, "blank", "Pending"),
        ("Pending", None, "blank", "Pending"),
        ("Bound", None, "blank", "PVCBound"),
        ("Bound", "Pending", "blank", "ImportScheduled"),
        ("Bound", "Running", "blank", "ImportInProgress"),
        ("Bound", "Running", "pvc", "CloneInProgress"),
        ("Bound", "Succeeded", "pvc", "Succeeded"),
        ("Lost", None, "blank", "Failed"),
    ],
)
def test_data_volume_phase(pvc_phase: str | None, pod_phase: str | None, source: str, expected: str) -> None:
    from pykubevirt.storage.datavolume_claim import dv_phase

    dv = {"spec": {"source": {source: {}}}}
    claim = None if pvc_phase is None else {"metadata": {}, "status": {"phase": pvc_phase}}
    pod = None if pod_phase is None else {"status": {"phase": pod_phase}}
    assert dv_phase(dv, claim, pod) == expected


async def test_the_launcher_links_claims_and_prepares_their_images(tmp_path: Path) -> None:
    from pykubevirt.launcher import disks
    from pykubevirt.launcher.claim_volumes import prepare_claim_volumes

    volumes = {name: tmp_path / "volumes" / name for name in ("fs", "host", "eph")}
    for directory in volumes.values():
        directory.mkdir(parents=True)
    (volumes["eph"] / "disk.img").write_bytes(b"\0" * MI)
    block = tmp_path / "block.img"
    block.write_bytes(b"\0" * MI)
    mounts = {f"/var/run/kubevirt-private/vmi-disks/{n}": str(p) for n, p in volumes.items()}
    mounts["/dev/blk"] = str(block)
    vmi = {
        "spec": {
            "volumes": [
                {"name": "fs", "persistentVolumeClaim": {"claimName": "fs"}},
                {"name": "blk", "persistentVolumeClaim": {"claimName": "blk"}},
                {"name": "host", "hostDisk": {"path": "/x/y/h.img", "type": "DiskOrCreate", "capacity": "2Mi"}},
                {"name": "eph", "ephemeral": {"persistentVolumeClaim": {"claimName": "eph"}}},
            ]
        },
        "status": {
            "volumeStatus": [
                {
                    "name": "fs",
                    "persistentVolumeClaimInfo": {"capacity": {"storage": "8Mi"}, "requests": {"storage": "8Mi"}},
                }
            ]
        },
    }
    from pykubevirt.api.pod_layout import host_path

    runtime = tmp_path / "runtime"
    claims = await prepare_claim_volumes(vmi, lambda p: Path(host_path(p, mounts)), runtime)
    assert (volumes["fs"] / "disk.img").stat().st_size == 8 * MI
    assert (runtime / "vmi-disks" / "fs" / "disk.img").exists()
    # A block claim backed by a file is handed to QEMU as a raw file.
    assert (runtime / "vmi-disks" / "blk" / "disk.img").resolve() == block
    assert (volumes["host"] / "h.img").stat().st_size == 2 * MI
    assert claims.ephemeral == {"eph"}
    overlay = tmp_path / "overlay.qcow2"
    await disks.prepare_container_disk(runtime / "vmi-disks" / "eph" / "disk.img", overlay)
    assert await disks.image_format(overlay) == "qcow2"


def test_data_sources_of_a_claim() -> None:
    clone = pvc(dataSource={"kind": "PersistentVolumeClaim", "name": "golden"})
    sv.normalize_data_sources(clone)
    assert clone["spec"]["dataSourceRef"] == {"kind": "PersistentVolumeClaim", "name": "golden"}
    assert sv.validate_pvc(clone) == []
    bad = pvc(dataSource={"kind": "Snapshot"}, dataSourceRef={"kind": "PersistentVolumeClaim", "name": "x"})
    assert messages(sv.validate_pvc(bad)) == [
        "spec.dataSource.name: Required value",
        "spec.dataSource: Invalid value: \"Snapshot\": must be 'PersistentVolumeClaim' when referencing the default "
        "apiGroup",
        "spec.dataSource: Invalid value: must match dataSourceRef",
    ]


def test_the_importer_makes_blank_images_and_clones_that_fit(tmp_path: Path) -> None:
    import json as json_

    from pykubevirt.storage.importer import ImporterError, import_volume

    data, source = tmp_path / "data", tmp_path / "source"
    data.mkdir()
    source.mkdir()
    mounts = json_.dumps({"/data": str(data), "/source": str(source)})
    size = str(17783849)  # a 16Mi DataVolume's claim with CDI's 6 % overhead
    env = {"PYKUBEVIRT_MOUNTS": mounts, "IMPORTER_IMAGE_SIZE": size, "FILESYSTEM_OVERHEAD": "0.06"}
    assert import_volume({**env, "IMPORTER_SOURCE": "none"}) == "Import Complete"
    assert (data / "disk.img").stat().st_size == 16 * MI
    (data / "disk.img").unlink()
    (source / "disk.img").write_bytes(b"x" * MI)
    os.truncate(source / "disk.img", 32 * MI)
    with pytest.raises(ImporterError, match="is larger than the reported available storage"):
        import_volume({**env, "IMPORTER_SOURCE": "pvc"})
    assert list(data.iterdir()) == []  # nothing left behind that could pass for an image
    os.truncate(source / "disk.img", 8 * MI)
    assert import_volume({**env, "IMPORTER_SOURCE": "pvc"}) == "Clone Complete"
    image = (data / "disk.img").read_bytes()
    assert len(image) == 16 * MI and image[:MI] == b"x" * MI
