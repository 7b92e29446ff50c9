"""The upload controller's pure parts: which claims it serves, the pod it makes, and what a claim says of its pod."""

from __future__ import annotations

from typing import Any

from pykubevirt.storage import datavolume_claim as dvc
from pykubevirt.storage import upload_controller as uc

ANN = "cdi.kubevirt.io/storage."


def claim(annotations: dict[str, str] | None = None, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "disk", "namespace": "team", "uid": "pvc-uid"}
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    return {
        "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }


def server(phase: str, state: dict[str, Any] | None = None, restarts: int = 0) -> dict[str, Any]:
    statuses = [{"name": "cdi-upload-server", "restartCount": restarts, "state": state}] if state else []
    return {"metadata": {"name": "cdi-upload-disk"}, "status": {"phase": phase, "containerStatuses": statuses}}


def test_only_upload_targets_no_data_volume_keeps_are_served() -> None:
    target = {ANN + "upload.target": ""}
    assert uc.upload_target_key(claim(target)) == ["team/disk"]
    assert uc.upload_target_key(claim()) == []
    assert uc.upload_target_key(claim({"other": "x"})) == []
    dv_owner = {"kind": "DataVolume", "name": "disk", "uid": "dv", "controller": True}
    assert uc.upload_target_key(claim(target, [dv_owner])) == []
    assert uc.upload_target_key(claim({**target, "cdi.kubevirt.io/createdForDataVolume": "dv"})) == []
    # A DataVolume that merely shares ownership does not keep it.
    assert uc.upload_target_key(claim(target, [{**dv_owner, "controller": False}])) == ["team/disk"]


def test_upload_server_pods_map_to_their_claim_and_other_pods_to_nothing() -> None:
    owner = {"kind": "PersistentVolumeClaim", "name": "disk", "uid": "pvc-uid", "controller": True}
    pod = {"metadata": {"namespace": "team", "labels": {"cdi.kubevirt.io": "cdi-upload-server"}}}
    assert uc.upload_server_claim({**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}}) == ["team/disk"]
    assert uc.upload_server_claim(pod) == []
    importer = {
        "metadata": {"namespace": "team", "labels": {"cdi.kubevirt.io": "importer"}, "ownerReferences": [owner]}
    }
    assert uc.upload_server_claim(importer) == []


def test_only_kubevirt_content_without_a_clone_request_is_supported() -> None:
    assert uc.unsupported({}) == uc.unsupported({ANN + "contentType": "kubevirt"}) == ""
    assert uc.unsupported({ANN + "contentType": ""}) == ""
    assert uc.unsupported({ANN + "contentType": "archive"}) == ""
    assert uc.unsupported({ANN + "contentType": "iso"}) == "upload content-type iso is invalid"
    assert uc.unsupported({"k8s.io/CloneRequest": "ns/src"}) == "PVC has both clone and upload annotations"
    assert uc.failure_annotations("why") == {
        "cdi.kubevirt.io/storage.condition.running": "false",
        "cdi.kubevirt.io/storage.condition.running.reason": "Error",
        "cdi.kubevirt.io/storage.condition.running.message": "why",
    }


def test_the_upload_pod_of_a_bare_claim_is_owned_by_it_and_reports_as_it() -> None:
    pod = dvc.upload_pod(claim({ANN + "upload.target": ""}))
    meta = pod["metadata"]
    assert meta["name"] == dvc.upload_pod_name("disk") == "cdi-upload-disk"
    assert meta["labels"]["cdi.kubevirt.io"] == "cdi-upload-server"
    assert meta["labels"]["cdi.kubevirt.io/uploadTarget"] == "pvc-uid"
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "PersistentVolumeClaim",
        "disk",
        "pvc-uid",
        True,
    )
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "UPLOAD_IMAGE_SIZE": "16Mi",
        "OWNER_UID": "pvc-uid",
        "FILESYSTEM_OVERHEAD": "0.06",
        "PREALLOCATION": "false",
    }
    assert container["command"] == ["pykubevirt", "cdi-uploadserver"]
    assert container["volumeMounts"] == [{"name": "cdi-data-vol", "mountPath": "/data"}]
    # With a DataVolume, as before: its uid is the owner the server reports progress for.
    dv = {"metadata": {"uid": "dv-uid"}, "spec": {"source": {"upload": {}}}}
    with_dv = dvc.upload_pod(claim(), dv)
    assert with_dv["metadata"]["name"] == dvc.pod_name(dv, "disk") == "cdi-upload-disk"
    assert {e["name"]: e["value"] for e in with_dv["spec"]["containers"][0]["env"]}["OWNER_UID"] == "dv-uid"


LOG = "Upload server listening on http://127.0.0.1:41234\n"


def test_a_running_server_is_ready_once_its_log_says_where_it_listens() -> None:
    pending = uc.server_annotations({}, server("Pending"), "")
    assert (pending[ANN + "pod.phase"], pending[ANN + "pod.ready"]) == ("Pending", "false")
    running = server("Running", {"running": {}})
    assert uc.server_annotations({}, running, "")[ANN + "pod.ready"] == "false"
    wanted = uc.server_annotations({}, running, LOG)
    assert wanted == {
        ANN + "pod.phase": "Running",
        ANN + "pod.restarts": "0",
        ANN + "pod.ready": "true",
        "upload.pykubevirt.io/server-url": "http://127.0.0.1:41234",
        "cdi.kubevirt.io/storage.condition.running": "true",
        "cdi.kubevirt.io/storage.condition.running.reason": "Pod is running",
        "cdi.kubevirt.io/storage.condition.running.message": "",
    }
    # The address scrolled out of the tail: what was recorded stays.
    assert uc.server_annotations(wanted, running, "other lines\n") == wanted
    # A restarted server says where it listens now; the restart count never goes down.
    moved = uc.server_annotations(wanted, server("Running", {"running": {}}, restarts=2), LOG + LOG.replace("41", "42"))
    assert (moved["upload.pykubevirt.io/server-url"], moved[ANN + "pod.restarts"]) == ("http://127.0.0.1:42234", "2")
    assert uc.server_annotations({**wanted, ANN + "pod.restarts": "3"}, running, LOG)[ANN + "pod.restarts"] == "3"


def test_a_finished_server_is_no_longer_ready_and_a_failed_start_says_why() -> None:
    done = server("Succeeded", {"terminated": {"reason": "Completed", "exitCode": 0}})
    wanted = uc.server_annotations({ANN + "pod.ready": "true"}, done, "")
    assert (wanted[ANN + "pod.phase"], wanted[ANN + "pod.ready"], wanted["upload.pykubevirt.io/server-url"]) == (
        "Succeeded",
        "false",
        "",
    )
    assert (wanted["cdi.kubevirt.io/storage.condition.running"], wanted[uc.RUNNING_REASON]) == ("false", "Completed")
    crashed = server("Running", {"terminated": {"reason": "Error", "exitCode": 1}}, restarts=1)
    failure = uc.server_annotations({}, crashed, "Unable to process data: no space left on device\n")
    assert (failure[uc.RUNNING], failure[uc.RUNNING_REASON], failure[uc.RUNNING_MESSAGE]) == (
        "false",
        "Error",
        "DataVolume too small to contain image",
    )
