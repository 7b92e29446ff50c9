"""The source pod of a clone from another namespace, as CDI's MakeCloneSourcePodSpec lays it out."""

from __future__ import annotations

from typing import Any

from pykubevirt.storage import datavolume_claim as dvc

TARGET = {"metadata": {"name": "disk", "namespace": "team", "uid": "t-uid"}}
DV: dict[str, Any] = {
    "metadata": {"name": "disk", "namespace": "team", "uid": "dv-uid"},
    "spec": {"source": {"pvc": {"namespace": "golden", "name": "fedora"}}},
}


def source(mode: str = "Filesystem") -> dict[str, Any]:
    return {"metadata": {"name": "fedora", "namespace": "golden", "uid": "s-uid"}, "spec": {"volumeMode": mode}}


def test_the_source_pod_runs_in_the_source_namespace_with_the_claim_read_only() -> None:
    pod = dvc.clone_source_pod(TARGET, DV, source(), "http://127.0.0.1:40000/")
    meta, spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"]) == ("t-uid-source-pod", "golden")
    # Not owned (owners cannot be in another namespace): CDI's annotation names the target claim.
    assert "ownerReferences" not in meta
    assert meta["annotations"]["cdi.kubevirt.io/storage.ownerRef"] == "team/disk"
    assert meta["labels"]["cdi.kubevirt.io"] == "cdi-clone-source"
    (container,) = spec["containers"]
    assert container["command"] == ["pykubevirt", "cdi-clone-source"]
    assert container["volumeMounts"] == [
        {"name": "cdi-data-vol", "mountPath": "/var/run/cdi/clone/source", "readOnly": True}
    ]
    assert spec["volumes"] == [
        {"name": "cdi-data-vol", "persistentVolumeClaim": {"claimName": "fedora", "readOnly": True}}
    ]
    assert (
        dvc.upload_url_of(pod)
        == dvc.upload_endpoint("http://127.0.0.1:40000")
        == "http://127.0.0.1:40000/v1beta1/upload"
    )
    assert spec["restartPolicy"] == "OnFailure"


def test_a_block_source_is_a_device_and_only_other_namespaces_clone_through_an_upload_server() -> None:
    pod = dvc.clone_source_pod(TARGET, DV, source("Block"), "http://127.0.0.1:40000")
    (container,) = pod["spec"]["containers"]
    assert container["volumeDevices"] == [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
    assert "volumeMounts" not in container
    assert dvc.is_cross_namespace_clone(DV) and dvc.takes_upload(DV)
    assert dvc.pod_name(DV, "disk") == "cdi-upload-disk"
    same = {"metadata": {"namespace": "golden"}, "spec": DV["spec"]}
    assert not dvc.is_cross_namespace_clone(same) and dvc.pod_name(same, "disk") == "importer-disk"
    assert dvc.upload_url_of({"spec": {"containers": [{"name": "x"}]}}) == ""
