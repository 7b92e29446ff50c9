"""KubeVirt's VirtualMachineSnapshot and VirtualMachineRestore admitters on plain data: every message and field path
of pkg/storage/admitters/vmsnapshot.go and vmrestore.go, and the snapshot.kubevirt.io kinds' CRDs."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.admission import chain
from pykubevirt.admission.causes import AdmissionRejected, RequestDenied
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.review import review
from pykubevirt.admission.validation import REQUEST_ERROR, validate_vm_restore, validate_vm_snapshot
from pykubevirt.admission.validation.snapshot import _Refused, go_duration_nanoseconds
from pykubevirt.api.causes import Cause
from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kinds import (
    ALL_KINDS,
    VIRTUAL_MACHINE_RESTORE,
    VIRTUAL_MACHINE_SNAPSHOT,
    VIRTUAL_MACHINE_SNAPSHOT_CONTENT,
    kind_for,
)
from pykubevirt.config.cluster_config import ClusterConfig

NS = "default"
INVALID = "FieldValueInvalid"
NOT_FOUND = "FieldValueNotFound"
REQUIRED = "FieldValueRequired"
BACKEND_STORAGE = (
    "Restore to a different VM is not supported when snapshotted VM has backend storage (persistent TPM or EFI)"
)


class Objects:
    """A lookup over plain objects, keyed by kind, namespace and name."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next((o for o in self.list(kind, namespace) if o["metadata"]["name"] == name), None)

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return [
            o
            for o in self.objects
            if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]


def ctx(*objects: dict[str, Any], disabled: frozenset[str] = frozenset()) -> AdmissionContext:
    return AdmissionContext(config=ClusterConfig(disabled_feature_gates=disabled), lookup=Objects(*objects))


def snapshot(**source: Any) -> dict[str, Any]:
    ref = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm", **source}
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap", "namespace": NS},
        "spec": {"source": {k: v for k, v in ref.items() if v is not None}},
    }


def restore(name: str = "restore", *, target: str = "vm", snap: str = "snap", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineRestore",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target},
            "virtualMachineSnapshotName": snap,
            **spec,
        },
    }


def vm(name: str = "vm", uid: str = "vm-uid") -> dict[str, Any]:
    return {"kind": "VirtualMachine", "metadata": {"name": name, "namespace": NS, "uid": uid}, "spec": {}}


def ready_snapshot(source_uid: str | None = "vm-uid", content: str | None = "content") -> dict[str, Any]:
    status: dict[str, Any] = {"readyToUse": True}
    if source_uid is not None:
        status["sourceUID"] = source_uid
    if content is not None:
        status["virtualMachineSnapshotContentName"] = content
    return {**snapshot(), "status": status}


def content(template_spec: dict[str, Any] | None = None, *, with_vm: bool = True) -> dict[str, Any]:
    source: dict[str, Any] = {}
    if with_vm:
        source["virtualMachine"] = {"spec": {"template": {"spec": template_spec or {}}}}
    return {
        "kind": "VirtualMachineSnapshotContent",
        "metadata": {"name": "content", "namespace": NS},
        "spec": {"source": source},
    }


def error(message: str) -> list[Cause]:
    return [Cause(REQUEST_ERROR, message, "")]


# --- VirtualMachineSnapshot ------------------------------------------------------------------------------------------


def test_a_snapshot_of_a_kubevirt_virtual_machine_is_admitted() -> None:
    assert validate_vm_snapshot(snapshot(), ctx()) == []
    assert validate_vm_snapshot({**snapshot(), "spec": {**snapshot()["spec"], "failureDeadline": "1m30s"}}, ctx()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"apiGroup": None}, Cause(NOT_FOUND, "missing apiGroup", "spec.source.apiGroup")),
        ({"apiGroup": ""}, Cause(INVALID, "invalid apiGroup", "spec.source.apiGroup")),
        ({"apiGroup": "pool.kubevirt.io"}, Cause(INVALID, "invalid apiGroup", "spec.source.apiGroup")),
        ({"kind": "VirtualMachineInstance"}, Cause(INVALID, "invalid kind", "spec.source.kind")),
    ],
)
def test_the_source_must_be_a_kubevirt_io_virtual_machine(source: dict[str, Any], expected: Cause) -> None:
    assert validate_vm_snapshot(snapshot(**source), ctx()) == [expected]


def test_without_the_snapshot_gate_a_create_is_refused_and_an_update_is_not() -> None:
    off = ctx(disabled=frozenset({"Snapshot"}))
    assert validate_vm_snapshot(snapshot(), off) == error("snapshot feature gate not enabled")
    assert validate_vm_snapshot(snapshot(), off, old=snapshot()) == []


def test_the_spec_is_immutable_after_creation_but_the_status_and_metadata_are_not() -> None:
    old = snapshot()
    changed = snapshot(name="other")
    assert validate_vm_snapshot(changed, ctx(), old=old) == [Cause(INVALID, "spec in immutable after creation", "spec")]
    relabelled = {**old, "metadata": {**old["metadata"], "finalizers": ["x"]}, "status": {"phase": "InProgress"}}
    assert validate_vm_snapshot(relabelled, ctx(), old=old) == []
    # Go compares the decoded spec: the same duration written twice ways is the same spec; "" differs from unset.
    five = {**old, "spec": {**old["spec"], "failureDeadline": "5m"}}
    same = {**old, "spec": {**old["spec"], "failureDeadline": "300s"}}
    assert validate_vm_snapshot(same, ctx(), old=five) == []
    policy = {**old, "spec": {**old["spec"], "deletionPolicy": ""}}
    assert validate_vm_snapshot(policy, ctx(), old=old) != []


@pytest.mark.parametrize(
    ("deadline", "message"),
    [
        ("abc", 'time: invalid duration "abc"'),
        ("", 'time: invalid duration ""'),
        ("5", 'time: missing unit in duration "5"'),
        ("5d", 'time: unknown unit "d" in duration "5d"'),
        (".s", 'time: invalid duration ".s"'),
    ],
)
def test_a_failure_deadline_go_cannot_decode_is_refused_as_the_decoding_error(deadline: str, message: str) -> None:
    bad = {**snapshot(), "spec": {**snapshot()["spec"], "failureDeadline": deadline}}
    assert validate_vm_snapshot(bad, ctx()) == error(message)
    assert validate_vm_snapshot(bad, ctx(), old=snapshot()) == error(message)


def test_go_durations() -> None:
    assert go_duration_nanoseconds("5m") == 300 * 10**9
    assert go_duration_nanoseconds("1h2m3.5s") == (3723 * 10**9) + 5 * 10**8
    assert go_duration_nanoseconds("-1.5ms") == -1_500_000
    assert go_duration_nanoseconds("0") == 0
    assert go_duration_nanoseconds("1µs") == go_duration_nanoseconds("1us") == 1000
    with pytest.raises(_Refused, match="invalid duration"):
        go_duration_nanoseconds("9999999999h")


# --- VirtualMachineRestore -------------------------------------------------------------------------------------------


def test_a_restore_of_a_snapshot_into_its_own_vm_is_admitted() -> None:
    assert validate_vm_restore(restore(), ctx(vm(), ready_snapshot())) == []
    # KubeVirt checks neither that the snapshot exists nor that it is ready: its controller waits for it.
    assert validate_vm_restore(restore(snap="missing"), ctx(vm())) == []


def test_without_the_snapshot_gate_a_restore_is_refused() -> None:
    off = ctx(vm(), ready_snapshot(), disabled=frozenset({"Snapshot"}))
    assert validate_vm_restore(restore(), off) == error("Snapshot/Restore feature gate not enabled")
    assert validate_vm_restore(restore(), off, old=restore()) == []


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ({"apiGroup": None}, Cause(NOT_FOUND, "missing apiGroup", "spec.target.apiGroup")),
        ({"apiGroup": "snapshot.kubevirt.io"}, Cause(INVALID, "invalid apiGroup", "spec.target.apiGroup")),
        ({"kind": "VirtualMachineInstance"}, Cause(INVALID, "invalid kind", "spec.target.kind")),
    ],
)
def test_the_target_must_be_a_kubevirt_io_virtual_machine(target: dict[str, Any], expected: Cause) -> None:
    bad = restore()
    bad["spec"]["target"] = {k: v for k, v in {**bad["spec"]["target"], **target}.items() if v is not None}
    # Nothing else is checked for another target: not even the patches.
    bad["spec"]["patches"] = ["nonsense"]
    assert validate_vm_restore(bad, ctx(vm(), ready_snapshot())) == [expected]


def test_an_unfinished_restore_of_the_same_target_is_in_progress() -> None:
    running = restore("first")
    done = {**restore("done"), "status": {"complete": True}}
    failed = {**restore("failed"), "status": {"complete": False}}
    elsewhere = restore("other-vm", target="other")
    objects = (vm(), ready_snapshot(), running, done, failed, elsewhere)
    assert validate_vm_restore(restore(), ctx(*objects)) == [
        Cause(INVALID, 'VirtualMachineRestore "first" in progress', "spec.target"),
        Cause(INVALID, 'VirtualMachineRestore "failed" in progress', "spec.target"),
    ]
    # Checked whatever the target: a refused target gets both causes.
    no_group = restore()
    del no_group["spec"]["target"]["apiGroup"]
    other = restore("first")
    del other["spec"]["target"]["apiGroup"]
    assert validate_vm_restore(no_group, ctx(other)) == [
        Cause(NOT_FOUND, "missing apiGroup", "spec.target.apiGroup"),
        Cause(INVALID, 'VirtualMachineRestore "first" in progress', "spec.target"),
    ]


@pytest.mark.parametrize(
    ("patch", "messages"),
    [
        ('{"op": "replace", "path": "/spec/running", "value": false}', []),
        ('{"op": "add", "path": "/metadata/labels/team", "value": "a"}', []),
        ('{"op": "add", "path": "/metadata/annotations/note", "value": "a"}', []),
        (
            '{"op": "replace", "path": "/metadata/name", "value": "new-vm"}',
            ['patching is valid only for elements under /spec/ only:  "path": "/metadata/name"'],
        ),
        (
            '{"op": "replace", "path": "/spec/x", "value": "a:b"}',
            ['patch format is not valid - one ":" expected in a single key-value json patch:  "value": "a:b"'],
        ),
        ("", ['patch format is not valid - one ":" expected in a single key-value json patch: ']),
    ],
)
def test_patches_may_change_only_the_spec_labels_and_annotations(patch: str, messages: list[str]) -> None:
    new = restore(target="new-vm", patches=[patch])
    causes = validate_vm_restore(new, ctx(vm(), ready_snapshot(), content()))
    assert causes == [Cause(INVALID, m, "spec.patches") for m in messages]


def test_patches_are_not_checked_when_the_snapshot_does_not_exist() -> None:
    # validateTargetVM returns no causes at all for a missing snapshot, those of the patches included.
    new = restore(target="new-vm", snap="missing", patches=['{"path": "/metadata/name"}'])
    assert validate_vm_restore(new, ctx()) == []


def test_a_vm_with_backend_storage_restores_only_into_itself() -> None:
    tpm = {"domain": {"devices": {"tpm": {"persistent": True}}}}
    efi = {"domain": {"firmware": {"bootloader": {"efi": {"persistent": True}}}}}
    for template_spec in (tpm, efi):
        objects = (vm(), ready_snapshot(), content(template_spec))
        assert validate_vm_restore(restore(), ctx(*objects)) == []
        assert validate_vm_restore(restore(target="new-vm"), ctx(*objects)) == [Cause(INVALID, BACKEND_STORAGE, "spec")]
        # A VM of the target's name that is not the snapshot's source is another VM.
        replaced = (vm(uid="another-uid"), ready_snapshot(), content(template_spec))
        assert validate_vm_restore(restore(), ctx(*replaced)) == [Cause(INVALID, BACKEND_STORAGE, "spec")]
    assert validate_vm_restore(restore(target="new-vm"), ctx(ready_snapshot(), content())) == []


def test_lookup_failures_are_plain_errors() -> None:
    new = restore(target="new-vm")
    assert validate_vm_restore(new, ctx(ready_snapshot(content=None))) == error(
        "snapshot content name is nil in vmSnapshot status"
    )
    assert validate_vm_restore(new, ctx(ready_snapshot())) == error(
        'virtualmachinesnapshotcontents.snapshot.kubevirt.io "content" not found'
    )
    assert validate_vm_restore(new, ctx(ready_snapshot(), content(with_vm=False))) == error(
        "unexpected snapshot source"
    )
    assert validate_vm_restore(restore(snap=""), ctx()) == error("resource name may not be empty")
    assert validate_vm_restore(restore(target=""), ctx(ready_snapshot())) == error("resource name may not be empty")


def test_volume_restore_overrides_name_a_volume_and_override_something() -> None:
    overrides = [
        {"volumeName": "disk", "restoreName": "new-disk"},
        {"volumeName": "disk", "labels": {}},
        {"restoreName": "x"},
        {"volumeName": "disk"},
    ]
    assert validate_vm_restore(restore(volumeRestoreOverrides=overrides), ctx(vm(), ready_snapshot())) == [
        Cause(REQUIRED, "must provide a volume name", "spec.volumeRestoreOverrides[2].volumeName"),
        Cause(REQUIRED, "must provide at least one overriden field", "spec.volumeRestoreOverrides[3]"),
    ]


def test_volume_restore_and_ownership_policies_are_kubevirts() -> None:
    objects = ctx(vm(), ready_snapshot())
    for policy in ("RandomizeNames", "InPlace", "PrefixTargetName"):
        assert validate_vm_restore(restore(volumeRestorePolicy=policy), objects) == []
    for owner in ("Vm", "None"):
        assert validate_vm_restore(restore(volumeOwnershipPolicy=owner), objects) == []
    bad = restore(volumeRestorePolicy="Keep", volumeOwnershipPolicy="Pod")
    assert validate_vm_restore(bad, objects) == [
        Cause(INVALID, 'volume restore policy "Keep" doesn\'t exist', "spec.volumeRestorePolicy"),
        Cause(INVALID, 'volume ownership policy "Pod" doesn\'t exist', "spec.volumeOwnershipPolicy"),
    ]


def test_the_restore_spec_is_immutable_after_creation() -> None:
    old = restore()
    assert validate_vm_restore(restore(snap="other"), ctx(), old=old) == [
        Cause(INVALID, "spec in immutable after creation", "spec")
    ]
    assert validate_vm_restore({**old, "status": {"complete": True}}, ctx(), old=old) == []
    # An empty list is the unset list to Go's semantic equality.
    assert validate_vm_restore(restore(patches=[], volumeRestoreOverrides=[]), ctx(), old=old) == []


# --- The chain and the webhooks --------------------------------------------------------------------------------------


def test_the_chain_answers_with_kubevirts_webhook_names() -> None:
    with pytest.raises(AdmissionRejected) as rejected:
        chain.validate(snapshot(kind="Pod"), ctx())
    assert rejected.value.status()["message"] == (
        'admission webhook "virtualmachinesnapshot-validator.snapshot.kubevirt.io" denied the request: invalid kind'
    )
    assert rejected.value.status()["code"] == 422
    with pytest.raises(RequestDenied) as denied:
        chain.validate(restore(), ctx(disabled=frozenset({"Snapshot"})))
    assert denied.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'admission webhook "virtualmachinerestore-validator.snapshot.kubevirt.io" denied the request: '
        "Snapshot/Restore feature gate not enabled",
        "code": 400,
    }
    # KubeVirt has no admitter for contents.
    assert not chain.handles("VirtualMachineSnapshotContent")
    assert chain.validate(content(), ctx(), operation=chain.UPDATE, old=content()) == []


def test_an_admission_review_is_answered_for_a_snapshot() -> None:
    request = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {"uid": "u1", "operation": "CREATE", "object": snapshot(apiGroup="apps")},
    }
    response = review(request, ctx(), mutating=False)["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "invalid apiGroup"
    assert response["status"]["details"]["causes"] == [
        {"reason": INVALID, "message": "invalid apiGroup", "field": "spec.source.apiGroup"}
    ]
    request["request"]["object"] = snapshot()
    assert review(request, ctx(), mutating=False)["response"] == {"uid": "u1", "allowed": True}
    # No mutator: the mutating review allows the object as it is.
    assert review(request, ctx(), mutating=True)["response"] == {"uid": "u1", "allowed": True}


# --- The CRDs --------------------------------------------------------------------------------------------------------


def columns(kind: Any) -> list[tuple[str, str, str]]:
    version = crd_manifest(kind)["spec"]["versions"][0]
    return [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]


def test_the_snapshot_crds_have_kubevirts_names_versions_and_columns() -> None:
    assert [k for k in ALL_KINDS if k.group == "snapshot.kubevirt.io"] == [
        VIRTUAL_MACHINE_SNAPSHOT,
        VIRTUAL_MACHINE_SNAPSHOT_CONTENT,
        VIRTUAL_MACHINE_RESTORE,
    ]
    names = {k.kind: crd_manifest(k)["spec"]["names"] for k in (VIRTUAL_MACHINE_SNAPSHOT, VIRTUAL_MACHINE_RESTORE)}
    assert names["VirtualMachineSnapshot"]["shortNames"] == ["vmsnapshot", "vmsnapshots"]
    assert names["VirtualMachineRestore"]["shortNames"] == ["vmrestore", "vmrestores"]
    assert crd_manifest(VIRTUAL_MACHINE_SNAPSHOT_CONTENT)["spec"]["names"]["shortNames"] == [
        "vmsnapshotcontent",
        "vmsnapshotcontents",
    ]
    for kind in (VIRTUAL_MACHINE_SNAPSHOT, VIRTUAL_MACHINE_SNAPSHOT_CONTENT, VIRTUAL_MACHINE_RESTORE):
        manifest = crd_manifest(kind)
        assert manifest["spec"]["names"]["categories"] == ["all"]
        assert [
            (v["name"], v["served"], v["storage"], v.get("deprecated", False)) for v in manifest["spec"]["versions"]
        ] == [
            ("v1beta1", True, True, False),
            ("v1alpha1", True, False, False),
        ]
        assert manifest["spec"]["versions"][0]["subresources"] == {"status": {}}
        assert kind_for("snapshot.kubevirt.io/v1beta1", kind.kind) is kind
    ready = [
        ("ReadyToUse", "boolean", ".status.readyToUse"),
        ("CreationTime", "date", ".status.creationTime"),
        ("Error", "string", ".status.error.message"),
    ]
    assert columns(VIRTUAL_MACHINE_SNAPSHOT) == [
        ("SourceKind", "string", ".spec.source.kind"),
        ("SourceName", "string", ".spec.source.name"),
        ("Phase", "string", ".status.phase"),
        *ready,
    ]
    assert columns(VIRTUAL_MACHINE_SNAPSHOT_CONTENT) == ready
    assert columns(VIRTUAL_MACHINE_RESTORE) == [
        ("TargetKind", "string", ".spec.target.kind"),
        ("TargetName", "string", ".spec.target.name"),
        ("Complete", "boolean", ".status.complete"),
        ("RestoreTime", "date", ".status.restoreTime"),
    ]


def test_the_schemas_carry_kubevirts_fields() -> None:
    snap = VIRTUAL_MACHINE_SNAPSHOT.schema["properties"]
    assert set(snap["spec"]["properties"]) == {"source", "deletionPolicy", "failureDeadline"}
    assert snap["spec"]["properties"]["source"]["required"] == ["kind", "name"]
    assert "default" not in snap["spec"]["properties"]["failureDeadline"]  # the controller's 5m, not the CRD's
    assert set(snap["status"]["properties"]) == {
        "conditions",
        "creationTime",
        "error",
        "indications",
        "phase",
        "readyToUse",
        "snapshotVolumes",
        "sourceIndications",
        "sourceUID",
        "virtualMachineSnapshotContentName",
    }
    body = VIRTUAL_MACHINE_SNAPSHOT_CONTENT.schema["properties"]
    backup = body["spec"]["properties"]["volumeBackups"]["items"]
    assert set(backup["properties"]) == {"persistentVolumeClaim", "volumeName", "volumeSnapshotName"}
    assert set(body["status"]["properties"]) == {"creationTime", "error", "readyToUse", "volumeSnapshotStatus"}
    spec = VIRTUAL_MACHINE_RESTORE.schema["properties"]["spec"]
    assert spec["required"] == ["target", "virtualMachineSnapshotName"]
    policy = spec["properties"]["targetReadinessPolicy"]
    assert policy["default"] == "WaitGracePeriod"
    assert policy["enum"] == ["StopTarget", "WaitGracePeriod", "FailImmediate", "WaitEventually"]
    status = VIRTUAL_MACHINE_RESTORE.schema["properties"]["status"]["properties"]
    assert set(status) == {"complete", "conditions", "deletedDataVolumes", "restoreTime", "restores"}
    assert status["restores"]["items"]["required"] == ["persistentVolumeClaim", "volumeName", "volumeSnapshotName"]
