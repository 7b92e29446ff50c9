"""VirtualMachinePools with plain data: KubeVirt's pool admitter and the pool controller's decisions."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation import validate_vm_pool
from pykubevirt.api.constants import VM_POOL_FINALIZER, VM_POOL_REVISION_LABEL
from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.controller import vm_pool_plan as plan

CTX = AdmissionContext()
LABELS = {"kubevirt.io/vmpool": "web"}
POOL: dict[str, Any] = {
    "apiVersion": "pool.kubevirt.io/v1beta1",
    "kind": "VirtualMachinePool",
    "metadata": {"name": "web", "namespace": "team", "uid": "p-1", "generation": 4},
    "spec": {
        "replicas": 4,
        "selector": {"matchLabels": LABELS},
        "virtualMachineTemplate": {
            "metadata": {"labels": LABELS, "annotations": {"note": "x"}},
            "spec": {
                "runStrategy": "Always",
                "dataVolumeTemplates": [
                    {
                        "metadata": {"name": "root"},
                        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
                    }
                ],
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "domain": {
                            "devices": {
                                "disks": [
                                    {"name": "root", "disk": {}},
                                    {"name": "conf", "disk": {}},
                                    {"name": "keys", "disk": {}},
                                    {"name": "init", "disk": {}},
                                ]
                            }
                        },
                        "volumes": [
                            {"name": "root", "dataVolume": {"name": "root"}},
                            {"name": "conf", "configMap": {"name": "conf"}},
                            {"name": "keys", "secret": {"secretName": "keys"}},
                            {"name": "init", "cloudInitNoCloud": {"userDataSecretRef": {"name": "init"}}},
                        ],
                    },
                },
            },
        },
    },
}


def pool(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(POOL)
    body["spec"].update(spec)
    return body


def vm(name: str, created: str = "2026-01-01T00:00:00Z", revision: str | None = None) -> dict[str, Any]:
    labels = {VM_POOL_REVISION_LABEL: revision} if revision else {}
    return {"metadata": {"name": name, "creationTimestamp": created, "labels": labels}, "spec": {}}


# --------------------------------------------------------------------------------------------- admission


def test_a_valid_pool_passes_and_a_bad_one_reads_as_kubevirt_words_it() -> None:
    assert validate_vm_pool(pool(), CTX) == []
    causes = validate_vm_pool(pool(selector={"matchLabels": {"kubevirt.io/vmpool": "db"}}), CTX)
    assert [(c.field, c.message) for c in causes] == [("spec.selector", "selector does not match labels.")]
    missing = pool()
    del missing["spec"]["virtualMachineTemplate"]
    assert [(c.field, c.message) for c in validate_vm_pool(missing, CTX)] == [
        ("spec.template", "missing virtual machine template.")
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("50", "maxUnavailable percentage must end with %"),
        ("abc%", 'maxUnavailable percentage value "abc" is invalid: strconv.Atoi: parsing "abc": invalid syntax'),
        ("0%", "maxUnavailable percentage value 0 must be between 1 and 100"),
        ("101%", "maxUnavailable percentage value 101 must be between 1 and 100"),
        (0, "maxUnavailable must be greater than 0"),
    ],
)
def test_max_unavailable(value: Any, message: str) -> None:
    causes = validate_vm_pool(pool(maxUnavailable=value), CTX)
    assert [(c.field, c.message) for c in causes] == [("spec.maxUnavailable", message)]
    assert validate_vm_pool(pool(maxUnavailable="25%"), CTX) == validate_vm_pool(pool(maxUnavailable=2), CTX) == []


def test_strategies_are_exclusive_and_the_selector_immutable() -> None:
    both = pool(scaleInStrategy={"unmanaged": {}, "proactive": {}})
    assert [c.message for c in validate_vm_pool(both, CTX)] == [
        "only one strategy can be configured at a time: but found unmanaged, proactive strategies"
    ]
    changed = pool(selector={"matchLabels": LABELS, "matchExpressions": []})
    assert [c.message for c in validate_vm_pool(changed, CTX, old=pool())] == ["selector is immutable after creation."]
    assert validate_vm_pool(pool(replicas=9), CTX, old=pool()) == []


# --------------------------------------------------------------------------------------------- the controller


def test_new_vms_take_the_lowest_free_indexes() -> None:
    assert plan.new_names(3, "web", {"web-0", "web-2", "other-1"}) == ["web-1", "web-3", "web-4"]
    assert plan.index_of("web-12") == 12 and plan.index_of("web") is None


def test_a_vm_is_the_indexed_template_with_the_pools_revision_and_finalizer() -> None:
    owner = {"kind": "VirtualMachinePool", "name": "web", "uid": "p-1", "controller": True}
    made = plan.new_vm(pool(nameGeneration={"appendIndexToSecretRefs": True}), "web-3", "web-4", owner)
    assert made["metadata"] == {
        "name": "web-3",
        "finalizers": [VM_POOL_FINALIZER],
        "ownerReferences": [owner],
        "labels": {**LABELS, VM_POOL_REVISION_LABEL: "web-4"},
        "annotations": {"note": "x"},
    }
    spec = made["spec"]
    assert spec["dataVolumeTemplates"][0]["metadata"]["name"] == "root-3"
    assert spec["template"]["metadata"]["labels"][VM_POOL_REVISION_LABEL] == "web-4"
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["root"]["dataVolume"]["name"] == "root-3"
    # ConfigMaps keep their names unless asked; Secrets (and cloud-init's) get the index here.
    assert volumes["conf"]["configMap"]["name"] == "conf"
    assert volumes["keys"]["secret"]["secretName"] == "keys-3"
    assert volumes["init"]["cloudInitNoCloud"]["userDataSecretRef"]["name"] == "init-3"
    assert POOL["spec"]["virtualMachineTemplate"]["spec"]["dataVolumeTemplates"][0]["metadata"]["name"] == "root"


def test_an_update_keeps_the_firmware_identity() -> None:
    old = plan.new_vm(pool(), "web-0", "web-4", {"uid": "p-1"})
    old["spec"]["template"]["spec"]["domain"]["firmware"] = {"uuid": "u-0", "serial": "s-0"}
    changed = pool()
    changed["spec"]["virtualMachineTemplate"]["metadata"]["labels"] = {**LABELS, "tier": "2"}
    updated = plan.updated_vm(changed, old, "web-5")
    assert updated["spec"]["template"]["spec"]["domain"]["firmware"] == {"uuid": "u-0", "serial": "s-0"}
    assert updated["metadata"]["labels"] == {**LABELS, "tier": "2", VM_POOL_REVISION_LABEL: "web-5"}
    assert updated["metadata"]["finalizers"] == [VM_POOL_FINALIZER]


def test_outdated_vms_and_what_their_vmis_need() -> None:
    revisions = {"web-1": {"data": copy.deepcopy(POOL["spec"])}, "web-2": {"data": copy.deepcopy(POOL["spec"])}}
    changed = copy.deepcopy(POOL["spec"])
    changed["virtualMachineTemplate"]["spec"]["template"]["metadata"]["labels"] = {**LABELS, "tier": "2"}
    revisions["web-3"] = {"data": changed}
    lookup = revisions.get
    assert not plan.vm_outdated(pool(), vm("web-0", revision="web-1"), lookup)
    assert plan.vm_outdated(pool(), vm("web-0", revision="web-3"), lookup)
    assert plan.vm_outdated(pool(), vm("web-0"), lookup)

    def instance(revision: str | None) -> dict[str, Any]:
        return {"metadata": {"labels": {VM_POOL_REVISION_LABEL: revision} if revision else {}}}

    assert plan.vmi_update(vm("a", revision="web-1"), instance("web-1"), lookup) == plan.UPDATE_NONE
    assert plan.vmi_update(vm("a", revision="web-2"), instance("web-1"), lookup) == plan.UPDATE_LABEL
    assert plan.vmi_update(vm("a", revision="web-3"), instance("web-1"), lookup) == plan.UPDATE_RESTART
    assert plan.vmi_update(vm("a", revision="web-3"), instance(None), lookup) == plan.UPDATE_RESTART
    assert plan.vmi_update(vm("a", revision="web-1"), instance("gone"), lookup) == plan.UPDATE_RESTART
    new_disks = copy.deepcopy(POOL["spec"])
    new_disks["virtualMachineTemplate"]["spec"]["dataVolumeTemplates"][0]["spec"]["source"] = {"http": {"url": "x"}}
    revisions["web-4"] = {"data": new_disks}
    assert plan.vmi_update(vm("a", revision="web-4"), instance("web-1"), lookup) == plan.UPDATE_DELETE_VM


def test_sort_policies_and_selectors() -> None:
    vms = [
        vm("web-2", "2026-01-02T00:00:00Z"),
        vm("web-10", "2026-01-03T00:00:00Z"),
        vm("web-1", "2026-01-01T00:00:00Z"),
    ]

    def names(found: list[dict[str, Any]]) -> list[str]:
        return [v["metadata"]["name"] for v in found]

    assert names(plan.sorted_vms(vms, "AscendingOrder")) == ["web-1", "web-2", "web-10"]
    assert names(plan.sorted_vms(vms, "DescendingOrder")) == ["web-10", "web-2", "web-1"]
    assert names(plan.sorted_vms(vms, "Newest")) == ["web-10", "web-2", "web-1"]
    assert names(plan.sorted_vms(vms, "Oldest")) == ["web-1", "web-2", "web-10"]
    assert sorted(names(plan.sorted_vms(vms, "Random", random.Random(3)))) == ["web-1", "web-10", "web-2"]
    assert plan.sort_policy(None) == "Random"
    vms[0]["spec"] = {"template": {"metadata": {"labels": {"zone": "a"}}, "spec": {"nodeSelector": {"rack": "7"}}}}
    by_label = {"proactive": {"selectionPolicy": {"selectors": {"labelSelector": {"matchLabels": {"zone": "a"}}}}}}
    assert names(plan.selected_vms(vms, by_label)) == ["web-2"]
    by_node = {
        "proactive": {
            "selectionPolicy": {
                "selectors": {"nodeSelectorRequirementMatcher": [{"key": "rack", "operator": "Gt", "values": ["5"]}]}
            }
        }
    }
    assert names(plan.selected_vms(vms, by_node)) == ["web-2"]


def test_max_unavailable_and_status() -> None:
    assert plan.max_unavailable(pool()) == 4
    assert plan.max_unavailable(pool(maxUnavailable="10%")) == 1
    assert plan.max_unavailable(pool(maxUnavailable=2)) == 2
    ready = {**vm("web-0"), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    status = plan.status_of(pool(paused=True), [ready, vm("web-1")], "kubevirt.io/vmpool=web", None, "T")
    assert status == {
        "replicas": 2,
        "readyReplicas": 1,
        "labelSelector": "kubevirt.io/vmpool=web",
        "conditions": [
            {
                "type": "ReplicaPaused",
                "status": "True",
                "reason": "SuccessfulPaused",
                "message": "Pool controller is paused",
                "lastTransitionTime": "T",
            }
        ],
    }
    failing = plan.status_of(pool(), [], "", ("FailedScaleOut", "error during scale out: quota"), "T")
    assert failing["conditions"][0]["reason"] == "FailedScaleOut" and "replicas" not in failing


def test_go_durations() -> None:
    assert parse_go_duration("5m") == 300 and parse_go_duration("1h30m") == 5400
    assert parse_go_duration("250ms") == 0.25 and parse_go_duration("0") == 0
    # Go's texts, each for its reason.
    for bad, message in (
        ("5", 'time: missing unit in duration "5"'),
        ("", 'time: invalid duration ""'),
        ("m", 'time: invalid duration "m"'),
        ("5 m", 'time: unknown unit " m" in duration "5 m"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
    ):
        with pytest.raises(ValueError) as refused:
            parse_go_duration(bad)
        assert str(refused.value) == message


def test_autohealing_picks_vms_that_keep_failing() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def failing(status: str, since: str, failures: int = 0) -> dict[str, Any]:
        body = vm(status)
        body["status"] = {
            "printableStatus": status,
            "conditions": [{"type": "Ready", "status": "False", "lastProbeTime": since}],
        }
        if failures:
            body["status"]["startFailure"] = {"consecutiveFailCount": failures}
        return body

    crash_old = failing("CrashLoopBackOff", "2026-01-01T11:50:00Z")
    crash_new = failing("CrashLoopBackOff", "2026-01-01T11:58:00Z")
    unschedulable = failing("ErrorUnschedulable", "2026-01-01T11:00:00Z")
    starting = failing("Starting", "2026-01-01T11:00:00Z")
    three_failures = failing("Running", "2026-01-01T11:59:00Z", failures=3)
    vms = [crash_old, crash_new, unschedulable, starting, three_failures]
    assert plan.failing_vms(vms, {}, now) == [crash_old, unschedulable, three_failures]
    tight = {"minFailingToStartDuration": "1m", "startUpFailureThreshold": 4}
    assert plan.failing_vms(vms, tight, now) == [crash_old, crash_new, unschedulable]


def test_autohealing_looks_again_when_the_next_vm_reaches_its_window() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def stuck(since: str) -> dict[str, Any]:
        body = vm("web-0")
        body["status"] = {
            "printableStatus": "ErrorUnschedulable",
            "conditions": [{"type": "Ready", "status": "False", "lastProbeTime": since}],
        }
        return body

    healing = {"minFailingToStartDuration": "1m"}
    assert plan.autohealing_recheck([stuck("2026-01-01T11:59:40Z"), stuck("2026-01-01T11:59:20Z")], healing, now) == 20
    # One already past its window is replaced now; a healthy pool needs no second look.
    assert plan.autohealing_recheck([stuck("2026-01-01T11:58:00Z")], healing, now) is None
    assert plan.autohealing_recheck([vm("web-1")], healing, now) is None


@pytest.mark.parametrize(
    ("strategy", "proactive", "opportunistic"),
    [
        (None, False, False),
        ({"proactive": {}}, False, False),
        ({"proactive": {"statePreservation": "Disabled"}}, False, False),
        ({"proactive": {"statePreservation": "Offline"}}, True, False),
        ({"opportunistic": {"statePreservation": "Online"}}, False, True),
    ],
)
def test_which_scale_in_keeps_a_removed_vms_disks(
    strategy: dict[str, Any] | None, proactive: bool, opportunistic: bool
) -> None:
    pool = {"spec": {"scaleInStrategy": strategy} if strategy is not None else {}}
    assert plan.preserves_state(pool, "proactive") is proactive
    assert plan.preserves_state(pool, "opportunistic") is opportunistic


def test_the_disks_a_vm_lets_go_of_are_its_templates_and_its_volumes_own() -> None:
    vm = {
        "spec": {
            "dataVolumeTemplates": [{"metadata": {"name": "root-3"}}],
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "root", "dataVolume": {"name": "root-3"}},
                        {"name": "data", "dataVolume": {"name": "shared"}},
                        {"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch-3"}},
                        {"name": "boot", "containerDisk": {"image": "x"}},
                    ]
                }
            },
        }
    }
    assert plan.preserved_disks(vm) == (["root-3", "shared"], ["root-3", "scratch-3"])
    assert plan.preserved_disks({"spec": {}}) == ([], [])
