"""A VirtualMachineExport's objects and status as plain data: names, the source's readiness, the exporter pod, the
links a download follows and the conditions KubeVirt writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import export_names as names
from pykubevirt.api.generated_names import fnv32a
from pykubevirt.controller import vm_export_plan as plan
from pykubevirt.controller.vm_export_controller import vm_definition


def export(kind: str = "PersistentVolumeClaim", name: str = "disk", **spec: Any) -> dict[str, Any]:
    group = {"VirtualMachine": "kubevirt.io"}.get(kind)
    source = {"kind": kind, "name": name, **({"apiGroup": group} if group else {})}
    return {
        "metadata": {
            "name": "exp",
            "namespace": "ns",
            "uid": "u-1",
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "labels": {"team": "a"},
        },
        "spec": {"source": source, **spec},
    }


def claim(name: str, *, phase: str = "Bound", block: bool = False, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"volumeMode": "Block" if block else "Filesystem", "accessModes": ["ReadWriteOnce"]},
        "status": {"phase": phase},
    }


def test_names_follow_library_gos_get_name_with_its_fnv_hash() -> None:
    assert names.exporter_pod_name("exp") == "virt-export-exp"
    assert names.service_name("my.export") == "virt-export-my-export"
    assert names.token_secret_name("exp") == "export-token-exp"
    # FNV-1a, 32 bits, as Go's hash/fnv New32a.
    assert (fnv32a(""), fnv32a("a")) == ("811c9dc5", "e40c292c")
    # A suffix too long for any of the base: the base and the hash of the whole name.
    assert names.exporter_pod_name("x" * 60) == "virt-export-" + fnv32a("virt-export-" + "x" * 60)
    # Room for part of the base: the base cut, the hash of the base, then the suffix.
    assert names.token_secret_name("y" * 51) == "ex-" + fnv32a("export-token") + "-" + "y" * 51
    # A name of 53 characters would make the Service's start with the hash: KubeVirt cuts one.
    assert names.service_name("a" * 53) == names.generated_name("virt-export", "a" * 52)
    assert names.pod_volume_name("a.b") == "a-b"


def test_a_claim_source_waits_for_its_claim_to_exist_be_populated_and_be_free() -> None:
    missing = plan.claim_source("ns", "disk", None, False, False)
    assert not missing.has_content and missing.ready.reason == "Initializing"
    assert missing.claim_condition == plan.Condition(
        "PVCReady", "False", "PVCNotFound", "PersistentVolumeClaim ns/disk not found"
    )
    filling = plan.claim_source("ns", "disk", claim("disk", phase="Pending"), False, False)
    assert (filling.ready.reason, filling.ready.message) == (
        "PVCPending",
        "PersistentVolumeClaim ns/disk is not populated",
    )
    assert filling.claim_condition is not None and filling.claim_condition.reason == "PVCPending"
    busy = plan.claim_source("ns", "disk", claim("disk"), True, True)
    assert not busy.available and busy.ready.message == "PersistentVolumeClaim ns/disk is in use"
    free = plan.claim_source("ns", "disk", claim("disk"), True, False)
    assert free.available and free.has_content
    assert free.claim_condition == plan.Condition("PVCReady", "True", "PVCBound")


def test_a_vm_source_needs_the_vm_its_volumes_populated_and_the_vm_stopped() -> None:
    assert plan.vm_source("ns", "vm", None, [], True, False).ready.message == "Virtual Machine ns/vm not found"
    empty = plan.vm_source("ns", "vm", {"metadata": {}}, [], True, False)
    assert empty.ready.reason == "VMNoVolumes" and empty.available and not empty.has_content
    partial = plan.vm_source("ns", "vm", {"metadata": {}}, [claim("a")], False, False)
    assert partial.ready.message == "Not all volumes in the Virtual Machine ns/vm are populated"
    running = plan.vm_source("ns", "vm", {"metadata": {}}, [claim("a")], True, True)
    assert running.ready.message == "Virtual Machine ns/vm is running" and not running.available
    stopped = plan.vm_source("ns", "vm", {"metadata": {}}, [claim("a")], True, False)
    assert stopped.available and stopped.vm_name == "vm" and stopped.claim_condition is None


def test_the_ttl_defaults_to_two_hours_from_creation() -> None:
    assert plan.expiration(export()) == datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    assert plan.expiration(export(ttlDuration="1h30m")) == datetime(2026, 12, 7, 11, 30, tzinfo=UTC)


def test_the_exporter_pod_mounts_each_claim_read_only_and_names_its_uris() -> None:
    source = plan.Source(claims=[claim("disk"), claim("files"), claim("raw", block=True)], populated=True)
    pod = plan.exporter_pod(
        export(), source, [True, False, True], "export-token-exp", datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    )
    assert pod["metadata"]["name"] == "virt-export-exp"
    assert pod["metadata"]["labels"] == {"kubevirt.io.virt-export-service": "exp", "team": "a"}
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachineExport"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["pykubevirt", "virt-exportserver"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["DEADLINE"] == "2026-12-07T12:00:00Z" and env["TOKEN_FILE"] == "/token/token"
    assert "EXPORT_VM_DEF_URI" not in env
    assert env["VOLUME0_EXPORT_PATH"] == "/export-volumes/disk"
    assert env["VOLUME0_EXPORT_RAW_URI"] == "/volumes/disk/disk.img"
    assert env["VOLUME0_EXPORT_RAW_GZIP_URI"] == "/volumes/disk/disk.img.gz"
    assert env["VOLUME1_EXPORT_ARCHIVE_URI"] == "/volumes/files/disk.tar.gz"
    assert env["VOLUME1_EXPORT_DIR_URI"] == "/volumes/files/dir/"
    assert env["VOLUME2_EXPORT_PATH"] == "/dev/export-volumes/raw"
    assert container["volumeDevices"] == [{"name": "raw", "devicePath": "/dev/export-volumes/raw"}]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["disk"]["readOnly"] and mounts["token"]["mountPath"] == "/token"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "export-token-exp"
    assert volumes["files"]["persistentVolumeClaim"] == {"claimName": "files", "readOnly": True}


def test_links_list_each_volume_with_its_formats_and_the_manifests() -> None:
    source = plan.Source(claims=[claim("disk"), claim("files")], populated=True, vm={"metadata": {}})
    pod = plan.exporter_pod(export(), source, [True, False], "t", datetime(2026, 12, 7, tzinfo=UTC), "cm")
    base = plan.external_base("127.0.0.1:6443", export())
    assert base == "127.0.0.1:6443/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/exp"
    link = plan.links(pod, base, "PEM")
    url = "https://" + base
    assert link == {
        "cert": "PEM",
        "manifests": [
            {"type": "all", "url": url + "/external/manifests/all"},
            {"type": "auth-header-secret", "url": url + "/external/manifests/secret"},
        ],
        "volumes": [
            {
                "name": "disk",
                "formats": [
                    {"format": "raw", "url": url + "/volumes/disk/disk.img"},
                    {"format": "gzip", "url": url + "/volumes/disk/disk.img.gz"},
                ],
            },
            {
                "name": "files",
                "formats": [
                    {"format": "dir", "url": url + "/volumes/files/dir/"},
                    {"format": "tar.gz", "url": url + "/volumes/files/disk.tar.gz"},
                ],
            },
        ],
    }


def test_disk_images_are_block_claims_or_kubevirt_content() -> None:
    assert plan.holds_disk_image(claim("b", block=True), None)
    assert plan.holds_disk_image(claim("k", **{plan.CONTENT_TYPE: "kubevirt"}), None)
    assert not plan.holds_disk_image(claim("a", **{plan.CONTENT_TYPE: "archive"}), None)
    assert not plan.holds_disk_image(claim("plain"), None)
    assert plan.holds_disk_image(claim("dv"), {"spec": {}})


def test_the_phase_follows_the_pod_and_its_servers_address() -> None:
    assert plan.pod_state(None, "")[0] == "Pending"
    running = {"status": {"phase": "Running"}}
    assert plan.pod_state(running, "")[1].reason == "PodPending"
    assert plan.pod_state(running, "http://127.0.0.1:1") == ("Ready", plan.ready_condition("True", "PodReady"))
    assert plan.pod_state({"status": {"phase": "Succeeded"}}, "")[0] == "Terminated"
    assert plan.pod_state({"status": {"phase": "Failed"}}, "")[1].reason == "Unknown"


def test_a_condition_keeps_its_transition_time_until_it_changes() -> None:
    first = plan.set_condition([], plan.ready_condition("False", "InUse", "busy"), "t1")
    again = plan.set_condition(first, plan.ready_condition("False", "InUse", "busy"), "t2")
    assert again == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "InUse",
            "message": "busy",
            "lastProbeTime": None,
            "lastTransitionTime": "t1",
        }
    ]
    changed = plan.set_condition(again, plan.ready_condition("True", "PodReady"), "t3")
    assert changed[0]["lastTransitionTime"] == "t3" and "message" not in changed[0]
    unchanged = plan.set_condition(changed, plan.ready_condition("True", "PodReady"), "t4")
    assert unchanged[0]["lastTransitionTime"] == "t3"


def test_the_vm_manifest_drops_status_and_points_its_volumes_at_http() -> None:
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm", "namespace": "ns", "uid": "x", "resourceVersion": "9", "labels": {"a": "b"}},
        "spec": {
            "dataVolumeTemplates": [
                {"metadata": {"name": "root"}, "spec": {"sourceRef": {"kind": "DataSource", "name": "f"}}}
            ],
            "template": {"spec": {}},
        },
        "status": {"ready": True},
    }
    root = claim("root")
    extra = claim("extra")
    extra["spec"]["resources"] = {"requests": {"storage": "1Gi"}}
    manifest, dvs = vm_definition(vm, [root, extra])
    assert manifest["metadata"] == {"name": "vm", "namespace": "ns", "labels": {"a": "b"}}
    assert "status" not in manifest
    assert manifest["spec"]["dataVolumeTemplates"][0]["spec"] == {"source": {"http": {"url": ""}}}
    assert vm["spec"]["dataVolumeTemplates"][0]["spec"]["sourceRef"]  # the cached VM is untouched
    assert dvs == [
        {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {"name": "extra", "namespace": "ns"},
            "spec": {
                "source": {"http": {"url": ""}},
                "storage": {
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Filesystem",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        }
    ]


def test_a_snapshot_source_serves_its_restored_claims_once_all_are_made() -> None:
    missing = plan.snapshot_source("ns", "snap", None, [], 0)
    assert missing.skipped and missing.ready.message == "VirtualMachineSnapshot ns/snap not found"
    assert missing.claim_condition == plan.Condition(
        "VolumesCreated",
        "False",
        "VMSnapshotNoVolumes",
        "VirtualMachineSnapshot ns/snap does not contain any volume snapshots",
    )
    snapshot: dict[str, Any] = {"spec": {"source": {"name": "vm"}}, "status": {"readyToUse": False}}
    waiting = plan.snapshot_source("ns", "snap", snapshot, [], 0)
    assert (waiting.vm_name, waiting.skipped, waiting.ready.reason) == ("vm", False, "NotAllPVCsCreated")
    assert waiting.ready.message == "VirtualMachineSnapshot ns/snap is not ready to use"
    snapshot["status"]["readyToUse"] = True
    assert plan.snapshot_source("ns", "snap", snapshot, [], 0).skipped
    partial = plan.snapshot_source("ns", "snap", snapshot, [claim("exp-a")], 2)
    assert partial.claim_condition is not None
    assert partial.claim_condition.message == "Not all PVCs have been successfully restored"
    assert not partial.has_content
    restored = plan.snapshot_source("ns", "snap", snapshot, [claim("exp-a", phase="Pending"), claim("exp-b")], 2)
    assert restored.available and restored.claim_condition == plan.Condition(
        "VolumesCreated", "False", "NotAllPVCsReady", "Not all PVCs are ready"
    )
    bound = plan.snapshot_source("ns", "snap", snapshot, [claim("exp-a"), claim("exp-b")], 2)
    assert bound.claim_condition == plan.Condition("VolumesCreated", "True", "AllPVCsReady")


def test_a_snapshot_exports_links_name_volumes_without_the_export_prefix() -> None:
    source = plan.Source(claims=[claim("exp-disk")], populated=True)
    pod = plan.exporter_pod(export(), source, [True], "t", datetime(2026, 12, 7, tzinfo=UTC))
    link = plan.links(pod, "h", "PEM", volume_prefix="exp-")
    assert [v["name"] for v in link["volumes"]] == ["disk"]
    assert link["volumes"][0]["formats"][0]["url"] == "https://h/volumes/exp-disk/disk.img"


def test_a_vm_export_without_volumes_to_serve_is_skipped() -> None:
    assert plan.vm_source("ns", "vm", None, [], True, False).skipped
    assert plan.vm_source("ns", "vm", {"metadata": {}}, [], True, False).skipped
    assert not plan.vm_source("ns", "vm", {"metadata": {}}, [claim("a")], True, False).skipped


def test_a_vm_source_serves_its_backend_storage_claim_but_names_only_its_own_claims_for_the_manifest() -> None:
    state = claim("persistent-state-for-vm-x1")
    source = plan.vm_source("ns", "vm", {"metadata": {}}, [claim("a")], True, False, state)
    assert [c["metadata"]["name"] for c in source.claims] == ["a", "persistent-state-for-vm-x1"]
    assert [c["metadata"]["name"] for c in source.vm_claims] == ["a"]
    only_state = plan.vm_source("ns", "vm", {"metadata": {}}, [], True, False, state)
    assert not only_state.skipped and only_state.ready.reason == "Initializing"
