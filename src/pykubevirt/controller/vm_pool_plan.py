"""What the VirtualMachinePool controller decides, as pure functions (KubeVirt's pkg/virt-controller/watch/pool).

A pool's VMs are `<pool>-<index>`, each made from the pool's template with its index appended to the DataVolumes it
owns (and, when asked, the ConfigMaps and Secrets it names), labelled with the pool revision (a ControllerRevision
of the pool's spec) it was made from; a VMI started from an older revision's template is restarted.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_equal import same_json
from pykubevirt.api.label_selectors import LabelSelector, label_selector_from_dict
from pykubevirt.api.node_selector_requirements import node_requirements_match
from pykubevirt.api.objects import condition, condition_true
from pykubevirt.api.timestamps import parse_time
from pykubevirt.controller.replica_set_plan import true_condition

Object = dict[str, Any]
RevisionLookup = Callable[[str], Object | None]

UPDATE_RESTART = "restart"
UPDATE_LABEL = "label-patch"
UPDATE_NONE = "no-update"
UPDATE_DELETE_VM = "vm-delete"

_INDEX = re.compile(r"-(\d+)$")


def wanted_replicas(pool: Mapping[str, Any]) -> int:
    replicas = (pool.get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1


def index_of(name: str) -> int | None:
    match = _INDEX.search(name)
    return int(match.group(1)) if match else None


def new_names(count: int, base: str, taken: set[str]) -> list[str]:
    """`count` names `<base>-<i>` with the lowest indexes no VM of the namespace has."""
    names: list[str] = []
    index = 0
    while len(names) < count:
        name = f"{base}-{index}"
        if name not in taken:
            names.append(name)
        index += 1
    return names


def revision_name(pool: Mapping[str, Any]) -> str:
    meta = pool.get("metadata") or {}
    return f"{meta['name']}-{meta.get('generation', 1)}"


def indexed_vm_spec(pool_spec: Mapping[str, Any], index: int) -> Object:
    """The template's VM spec for the VM with this index (KubeVirt's indexVMSpec)."""
    spec: Object = copy_json(dict((pool_spec.get("virtualMachineTemplate") or {}).get("spec") or {}))
    renamed: dict[str, str] = {}
    for template in spec.get("dataVolumeTemplates") or []:
        meta = template.setdefault("metadata", {})
        if meta.get("name"):
            renamed[meta["name"]] = f"{meta['name']}-{index}"
            meta["name"] = renamed[meta["name"]]
    naming = pool_spec.get("nameGeneration") or {}
    config_maps, secrets = bool(naming.get("appendIndexToConfigMapRefs")), bool(naming.get("appendIndexToSecretRefs"))
    suffix = f"-{index}"
    for volume in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []:
        if isinstance(volume.get("persistentVolumeClaim"), dict):
            claim = volume["persistentVolumeClaim"]
            claim["claimName"] = renamed.get(claim.get("claimName", ""), claim.get("claimName"))
        elif isinstance(volume.get("dataVolume"), dict):
            volume["dataVolume"]["name"] = renamed.get(
                volume["dataVolume"].get("name", ""), volume["dataVolume"].get("name")
            )
        elif isinstance(volume.get("configMap"), dict) and config_maps:
            volume["configMap"]["name"] = str(volume["configMap"].get("name", "")) + suffix
        elif isinstance(volume.get("secret"), dict) and secrets:
            volume["secret"]["secretName"] = str(volume["secret"].get("secretName", "")) + suffix
        elif secrets:
            for source in ("cloudInitNoCloud", "cloudInitConfigDrive"):
                cloud_init = volume.get(source)
                if not isinstance(cloud_init, dict):
                    continue
                for ref in ("userDataSecretRef", "networkDataSecretRef"):
                    if isinstance(cloud_init.get(ref), dict):
                        cloud_init[ref]["name"] = str(cloud_init[ref].get("name", "")) + suffix
    return spec


def _with_revision(vm: Object, revision: str) -> Object:
    vm["metadata"].setdefault("labels", {})[c.VM_POOL_REVISION_LABEL] = revision
    template = vm["spec"].setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("labels", {})[c.VM_POOL_REVISION_LABEL] = revision
    return vm


def new_vm(pool: Mapping[str, Any], name: str, revision: str, owner: Mapping[str, Any]) -> Object:
    """The pool's VM of this name: template labels and annotations, the indexed spec, the pool's finalizer."""
    template_meta = (pool["spec"].get("virtualMachineTemplate") or {}).get("metadata") or {}
    meta: Object = {"name": name, "finalizers": [c.VM_POOL_FINALIZER], "ownerReferences": [dict(owner)]}
    if template_meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    if template_meta.get("annotations"):
        meta["annotations"] = dict(template_meta["annotations"])
    vm = {"apiVersion": c.KUBEVIRT_API_VERSION, "kind": c.VM_KIND, "metadata": meta}
    vm["spec"] = indexed_vm_spec(pool["spec"], index_of(name) or 0)
    return _with_revision(vm, revision)


def updated_vm(pool: Mapping[str, Any], vm: Mapping[str, Any], revision: str) -> Object:
    """The VM brought to the pool's current template (opportunistic update), keeping the firmware identity it got."""
    updated: Object = copy_json(dict(vm))
    template_meta = (pool["spec"].get("virtualMachineTemplate") or {}).get("metadata") or {}
    updated["metadata"]["labels"] = dict(template_meta.get("labels") or {})
    updated["metadata"]["annotations"] = dict(template_meta.get("annotations") or {})
    if not updated["metadata"]["annotations"]:
        del updated["metadata"]["annotations"]
    updated["spec"] = indexed_vm_spec(pool["spec"], index_of(vm["metadata"]["name"]) or 0)
    old_firmware = (((vm.get("spec") or {}).get("template") or {}).get("spec") or {}).get("domain", {}).get("firmware")
    if isinstance(old_firmware, dict):
        domain = updated["spec"].setdefault("template", {}).setdefault("spec", {}).setdefault("domain", {})
        firmware = domain.setdefault("firmware", {})
        for key in ("uuid", "serial"):
            if old_firmware.get(key):
                firmware[key] = old_firmware[key]
    return _with_revision(updated, revision)


def _revision_spec(lookup: RevisionLookup, name: str) -> Object | None:
    revision = lookup(name)
    if revision is None:
        return None
    # As KubeVirt stores it: the pool's spec itself is the revision's data.
    data = revision.get("data")
    return data if isinstance(data, dict) else None


def vm_outdated(pool: Mapping[str, Any], vm: Mapping[str, Any], lookup: RevisionLookup) -> bool:
    """True when the VM was made from a template other than the pool's current one."""
    name = ((vm.get("metadata") or {}).get("labels") or {}).get(c.VM_POOL_REVISION_LABEL)
    if not name:
        return True
    old = _revision_spec(lookup, name)
    if old is None:
        return True
    return not same_json(old.get("virtualMachineTemplate"), pool["spec"].get("virtualMachineTemplate"))


def vmi_update(vm: Mapping[str, Any], vmi: Mapping[str, Any], lookup: RevisionLookup) -> str:
    """What a proactive update does to the VM's running VMI (KubeVirt's isOutdatedVMI)."""
    vm_revision = ((vm.get("metadata") or {}).get("labels") or {}).get(c.VM_POOL_REVISION_LABEL)
    if not vm_revision:
        return UPDATE_NONE
    vmi_revision = ((vmi.get("metadata") or {}).get("labels") or {}).get(c.VM_POOL_REVISION_LABEL)
    if not vmi_revision:
        return UPDATE_RESTART
    if vm_revision == vmi_revision:
        return UPDATE_NONE
    expected = _revision_spec(lookup, vm_revision)
    if expected is None:
        return UPDATE_NONE
    current = _revision_spec(lookup, vmi_revision)
    if current is None:
        return UPDATE_RESTART
    expected_vm = (expected.get("virtualMachineTemplate") or {}).get("spec") or {}
    current_vm = (current.get("virtualMachineTemplate") or {}).get("spec") or {}
    if not same_json(current_vm.get("dataVolumeTemplates"), expected_vm.get("dataVolumeTemplates")):
        return UPDATE_DELETE_VM
    if not same_json(current_vm.get("template"), expected_vm.get("template")):
        return UPDATE_RESTART
    return UPDATE_LABEL


def max_unavailable(pool: Mapping[str, Any]) -> int:
    """How many VMIs a proactive update may have unready at once (at least 1)."""
    value = (pool.get("spec") or {}).get("maxUnavailable", "100%")
    if isinstance(value, str):
        number = int(value.rstrip("%")) * wanted_replicas(pool) // 100
    else:
        number = int(value)
    return max(number, 1)


def preserves_state(pool: Mapping[str, Any], mode: str) -> bool:
    """Whether the scale-in strategy `mode` (proactive or opportunistic) keeps a removed VM's disks (Offline/Online)."""
    strategy = (((pool.get("spec") or {}).get("scaleInStrategy") or {}).get(mode)) or {}
    return str(strategy.get("statePreservation") or "Disabled") != "Disabled"


def preserved_disks(vm: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The DataVolumes and claims a VM lets go of under statePreservation: its templates' and its volumes' own."""
    spec = vm.get("spec") or {}
    templates = [str((t.get("metadata") or {}).get("name")) for t in spec.get("dataVolumeTemplates") or []]
    volumes = ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []
    data_volumes = [str(v["dataVolume"]["name"]) for v in volumes if (v.get("dataVolume") or {}).get("name")]
    claims = [
        str(v["persistentVolumeClaim"]["claimName"])
        for v in volumes
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]
    return list(dict.fromkeys(templates + data_volumes)), list(dict.fromkeys(templates + claims))


def sort_policy(strategy: Mapping[str, Any] | None, mode: str = "proactive") -> str:
    selection = ((strategy or {}).get(mode) or {}).get("selectionPolicy") or {}
    return str(selection.get("sortPolicy") or "Random")


def sorted_vms(vms: list[Object], policy: str, rng: random.Random | None = None) -> list[Object]:
    """The VMs in the order a sort policy chooses them (Random, the default, shuffles)."""
    if policy == "AscendingOrder":
        return sorted(vms, key=lambda vm: index_of(vm["metadata"]["name"]) or 0)
    if policy == "DescendingOrder":
        return sorted(vms, key=lambda vm: index_of(vm["metadata"]["name"]) or 0, reverse=True)
    if policy in ("Newest", "Oldest"):
        return sorted(
            vms, key=lambda vm: str(vm["metadata"].get("creationTimestamp") or ""), reverse=policy == "Newest"
        )
    shuffled = list(vms)
    (rng or random.Random()).shuffle(shuffled)
    return shuffled


def selected_vms(vms: list[Object], strategy: Mapping[str, Any] | None) -> list[Object]:
    """The VMs a proactive selection policy's selectors narrow the choice to (all when it has none)."""
    selectors = (((strategy or {}).get("proactive") or {}).get("selectionPolicy") or {}).get("selectors")
    if not isinstance(selectors, dict):
        return vms
    labels: LabelSelector | None = None
    if isinstance(selectors.get("labelSelector"), dict):
        labels = label_selector_from_dict(selectors["labelSelector"])
    requirements = selectors.get("nodeSelectorRequirementMatcher")
    chosen = []
    for vm in vms:
        template = (vm.get("spec") or {}).get("template") or {}
        if labels is not None and not labels.matches((template.get("metadata") or {}).get("labels") or {}):
            continue
        node_labels = (template.get("spec") or {}).get("nodeSelector") or {}
        if requirements and node_requirements_match(requirements, node_labels) is not True:
            continue
        chosen.append(vm)
    return chosen


# The printable statuses of a VM that autohealing replaces once it has failed long enough.
_FAILING_STATUSES = frozenset(
    {
        "CrashLoopBackOff",
        "ErrorUnschedulable",
        "DataVolumeError",
        "ErrorPvcNotFound",
        "ErrImagePull",
        "ImagePullBackOff",
    }
)
DEFAULT_START_FAILURE_THRESHOLD = 3
DEFAULT_MIN_FAILING_SECONDS = 300.0


def failing_vms(vms: list[Object], autohealing: Mapping[str, Any], now: datetime) -> list[Object]:
    """The VMs autohealing replaces (KubeVirt's filterFailingVMsToStart): as many start failures in a row as the
    threshold, or a failing printable status held (Ready False) for `minFailingToStartDuration`."""
    threshold = autohealing.get("startUpFailureThreshold") or DEFAULT_START_FAILURE_THRESHOLD
    window = _failing_window(autohealing)
    chosen = []
    for vm in vms:
        failures = ((vm.get("status") or {}).get("startFailure") or {}).get("consecutiveFailCount") or 0
        since = _failing_since(vm)
        if failures >= threshold or (since is not None and (now - since).total_seconds() >= window):
            chosen.append(vm)
    return chosen


def autohealing_recheck(vms: list[Object], autohealing: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until the first VM failing for less than the window reaches it: nothing else wakes the pool then, as
    a VM stuck in a failing status writes nothing more."""
    window = _failing_window(autohealing)
    waits = [
        window - (now - since).total_seconds()
        for since in map(_failing_since, vms)
        if since is not None and (now - since).total_seconds() < window
    ]
    return max(min(waits), 0.0) if waits else None


def _failing_window(autohealing: Mapping[str, Any]) -> float:
    try:
        return parse_go_duration(str(autohealing["minFailingToStartDuration"]))
    except (KeyError, ValueError):
        return DEFAULT_MIN_FAILING_SECONDS


def _failing_since(vm: Mapping[str, Any]) -> datetime | None:
    """When a VM in a failing printable status stopped being Ready; None when it is not failing."""
    if (vm.get("status") or {}).get("printableStatus") not in _FAILING_STATUSES:
        return None
    ready = condition(vm, "Ready")
    if ready is None or ready.get("status") != "False":
        return None
    # KubeVirt counts from the condition's lastProbeTime; ours may have none, then from its transition; a condition
    # with neither has been failing for as long as can be told (Go's zero time).
    return parse_time(str(ready.get("lastProbeTime") or ready.get("lastTransitionTime") or "")) or datetime.min.replace(
        tzinfo=UTC
    )


def vmi_ready(vmi: Mapping[str, Any] | None) -> bool:
    if vmi is None or (vmi.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (vmi.get("status") or {}).get("phase") == c.PHASE_RUNNING and condition_true(vmi, "Ready")


def status_of(
    pool: Mapping[str, Any], vms: list[Object], selector_text: str, failure: tuple[str, str] | None, now: str
) -> Object:
    """The pool's status: replicas, ready ones, the selector string and the ReplicaFailure and ReplicaPaused
    conditions (`failure`: the sync error's reason and message)."""
    old = dict(pool.get("status") or {})
    conditions = [dict(cond) for cond in old.get("conditions") or []]
    types = {cond.get("type") for cond in conditions}
    if failure is not None and "ReplicaFailure" not in types:
        reason, message = failure
        conditions.append(true_condition("ReplicaFailure", reason, message, now))
    elif failure is None:
        conditions = [cond for cond in conditions if cond.get("type") != "ReplicaFailure"]
    paused = bool((pool.get("spec") or {}).get("paused"))
    if paused and "ReplicaPaused" not in types:
        conditions.append(true_condition("ReplicaPaused", "SuccessfulPaused", "Pool controller is paused", now))
    elif not paused:
        conditions = [cond for cond in conditions if cond.get("type") != "ReplicaPaused"]
    status: Object = {
        "replicas": len(vms),
        "readyReplicas": len([vm for vm in vms if condition_true(vm, "Ready")]),
        "labelSelector": selector_text,
        "conditions": conditions,
    }
    return {k: v for k, v in status.items() if v not in (0, "", [])}
