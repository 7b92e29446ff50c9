"""VMI replica sets with plain data: KubeVirt's VMIRS admitter, the controller's decisions, and the /scale mapping."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation import validate_vmirs
from pykubevirt.api.causes import Cause, invalid, required
from pykubevirt.api.scale import ScaleRefused, ScaleSubresource, scale_errors, scale_of, scale_path_causes, scaled
from pykubevirt.controller import replica_set_plan as plan

CTX = AdmissionContext()
PATHS = ScaleSubresource(".spec.replicas", ".status.replicas", ".status.labelSelector")

RS: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstanceReplicaSet",
    "metadata": {"name": "web", "namespace": "team", "uid": "u-1", "resourceVersion": "7"},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web", "tier": "front"}},
            "spec": {
                "domain": {"devices": {"disks": [{"name": "root", "disk": {}}]}},
                "volumes": [{"name": "root", "containerDisk": {"image": "demo"}}],
            },
        },
    },
}


def rs(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(RS)
    body["spec"].update(spec)
    return body


def vmi(name: str, phase: str = "Running", *, ready: bool = True, created: str = "2026-01-01T00:00:00Z", **meta: Any):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": created, **meta},
        "status": {"phase": phase, "conditions": conditions},
    }


# --------------------------------------------------------------------------------------------- admission


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (rs(), []),
        (rs(selector={"matchLabels": {"app": "db"}}), [invalid("spec.selector", "selector does not match labels.")]),
        (
            rs(selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}),
            [],
        ),
        (
            rs(selector={"matchExpressions": [{"key": "tier", "operator": "Near"}]}),
            [invalid("spec.selector", '"Near" is not a valid label selector operator')],
        ),
        (rs(template=None), [required("spec.template", "missing virtual machine template.")]),
    ],
    ids=["valid", "selector-mismatch", "expressions", "bad-operator", "no-template"],
)
def test_the_admitter_checks_the_selector_against_the_template(body: dict[str, Any], expected: list[Cause]) -> None:
    assert validate_vmirs(body, CTX) == expected


def test_the_template_spec_is_validated_under_its_own_path() -> None:
    body = rs()
    body["spec"]["template"]["spec"]["volumes"] = []
    causes = validate_vmirs(body, CTX)
    assert [c.field for c in causes] == ["spec.template.spec.domain.devices.disks[0].name"]


# --------------------------------------------------------------------------------------------- the controller


def test_final_terminating_and_deleted_vmis_do_not_count() -> None:
    running = vmi("a")
    failed = vmi("b", "Failed")
    succeeded = vmi("c", "Succeeded")
    going = vmi("d", deletionTimestamp="2026-01-01T00:01:00Z")
    terminating = vmi("e")
    terminating["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodTerminating"}]
    everything = [running, failed, succeeded, going, terminating]
    assert plan.active(everything) == [running]
    assert plan.finished(everything) == [failed, succeeded, terminating]
    assert plan.ready(everything) == [running, failed, succeeded, going]


def test_scale_down_removes_pending_then_unready_then_newest_first() -> None:
    old = vmi("old", created="2026-01-01T00:00:00Z")
    new = vmi("new", created="2026-01-02T00:00:00Z")
    unready = vmi("unready", ready=False, created="2025-12-01T00:00:00Z")
    pending = vmi("pending", "Scheduling", ready=False, created="2025-11-01T00:00:00Z")
    order = plan.deletion_order([old, new, unready, pending])
    assert [v["metadata"]["name"] for v in order] == ["pending", "unready", "new", "old"]


def test_replicas_default_to_one() -> None:
    assert plan.wanted_replicas(rs(replicas=None)) == 1
    assert plan.wanted_replicas(rs(replicas=0)) == 0


def test_a_new_vmi_takes_the_template_and_is_named_after_the_set() -> None:
    owner = {"kind": "VirtualMachineInstanceReplicaSet", "name": "web", "uid": "u-1", "controller": True}
    made = plan.new_vmi(rs(), owner)
    assert made["metadata"] == {
        "labels": {"app": "web", "tier": "front"},
        "generateName": "web",
        "ownerReferences": [owner],
    }
    assert made["spec"] == RS["spec"]["template"]["spec"] and made["kind"] == "VirtualMachineInstance"
    named = rs()
    named["spec"]["template"]["metadata"]["generateName"] = "replica-"
    assert plan.new_vmi(named, owner)["metadata"]["generateName"] == "replica-"


def test_status_is_written_only_when_it_changes() -> None:
    body = rs()
    counted = [vmi("a"), vmi("b", ready=False)]
    status = plan.status_of(body, counted, "app=web", None, "T")
    assert status == {"replicas": 2, "readyReplicas": 1, "labelSelector": "app=web"}
    body["status"] = status
    assert plan.status_of(body, counted, "app=web", None, "T") is None

    failing = plan.status_of(body, counted, "app=web", "quota exceeded", "T")
    assert failing is not None and failing["conditions"] == [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": "quota exceeded",
            "lastTransitionTime": "T",
        }
    ]
    body["status"] = failing
    assert plan.status_of(body, counted, "app=web", None, "T") == status

    paused = rs(paused=True)
    paused["status"] = status
    written = plan.status_of(paused, counted, "app=web", None, "T")
    assert written is not None
    assert [(c["type"], c["reason"], c["message"]) for c in written["conditions"]] == [
        ("ReplicaPaused", "Paused", "Controller got paused")
    ]
    # Zero counts are left out, as KubeVirt's omitempty leaves them.
    assert plan.status_of(rs(), [], "", None, "T") is None


# --------------------------------------------------------------------------------------------- /scale


def test_the_scale_an_object_shows() -> None:
    body = rs()
    body["status"] = {"replicas": 2, "labelSelector": "app=web"}
    assert scale_of(body, PATHS) == {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "team", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"replicas": 3},
        "status": {"replicas": 2, "selector": "app=web"},
    }
    # Unset replicas read as 0; the apps kinds' LabelSelector object is rendered as a string.
    apps = ScaleSubresource(".spec.replicas", ".status.replicas", ".spec.selector")
    deployment = {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"b": "2", "a": "1"}}}}
    assert scale_of(deployment, apps)["spec"] == {}
    assert scale_of(deployment, apps)["status"] == {"replicas": 0, "selector": "a=1,b=2"}


def test_a_scale_write_sets_the_spec_path() -> None:
    updated, version = scaled(rs(), PATHS, {"spec": {"replicas": 5}, "metadata": {"resourceVersion": "6"}})
    assert updated["spec"]["replicas"] == 5 and version == "6"
    nested = ScaleSubresource(".spec.scaling.count", ".status.count")
    updated, version = scaled({"metadata": {}, "spec": {}}, nested, {"spec": {}})
    assert updated["spec"] == {"scaling": {"count": 0}} and version == ""
    with pytest.raises(ScaleRefused, match=r"cannot unmarshal string into Go struct field ScaleSpec\.spec\.replicas"):
        scaled(rs(), PATHS, {"spec": {"replicas": "many"}})


def test_scale_fields_are_validated_as_kube_validates_custom_resources() -> None:
    assert scale_errors(rs(replicas=-1), PATHS, status=False) == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: should be a non-negative integer",
            "field": ".spec.replicas",
        }
    ]
    assert scale_errors(rs(replicas=2**31), PATHS, status=False)[0]["message"] == (
        "Invalid value: 2147483648: should be less than or equal to 2147483647"
    )
    body = rs()
    body["status"] = {"replicas": -2, "labelSelector": 3}
    assert [c["field"] for c in scale_errors(body, PATHS, status=True)] == [".status.replicas", ".status.labelSelector"]
    assert scale_errors(rs(replicas=-1), PATHS, status=True) == []


def test_a_crds_scale_paths_are_checked_as_kube_checks_them() -> None:
    field = "spec.versions[0].subresources.scale"
    good = {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.count", "labelSelectorPath": ".spec.sel"}
    assert scale_path_causes(good, field) == []
    bad = {"specReplicasPath": ".status.size", "labelSelectorPath": ".metadata.x"}
    assert [(c["field"], c["message"]) for c in scale_path_causes(bad, field)] == [
        (f"{field}.specReplicasPath", 'Invalid value: ".status.size": should be a json path under .spec'),
        (f"{field}.statusReplicasPath", "Required value"),
        (
            f"{field}.labelSelectorPath",
            'Invalid value: ".metadata.x": should be a json path under either .spec or .status',
        ),
    ]
    assert (
        scale_path_causes({"specReplicasPath": "spec[0]", "statusReplicasPath": ".status.n"}, field)[0]["message"]
        == 'Invalid value: "spec[0]": must be a simple json path starting with .'
    )
