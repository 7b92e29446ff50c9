"""kube-apiserver's Priority admission plugin and PriorityClass validation, on plain data.

A pod's priority comes from the PriorityClass it names, or the globalDefault class, or 0; the class's value and
preemption policy are fixed once made. Messages are kube's (`plugin/pkg/admission/priority`,
`pkg/apis/scheduling/validation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pykubevirt.api import causes
from pykubevirt.api.causes import Cause

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPTION_POLICIES = ("Never", PREEMPT_LOWER_PRIORITY)
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
SYSTEM_CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_NODE_CRITICAL = "system-node-critical"
# The classes kube-apiserver creates at start and keeps: (name, value, description).
SYSTEM_PRIORITY_CLASSES = (
    (
        SYSTEM_NODE_CRITICAL,
        2 * HIGHEST_USER_DEFINABLE_PRIORITY + 1000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        SYSTEM_CLUSTER_CRITICAL,
        2 * HIGHEST_USER_DEFINABLE_PRIORITY,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
)
SYSTEM_CLASS_UNDELETABLE = "this is a system priority class and cannot be deleted"


def system_priority_classes() -> list[dict[str, Any]]:
    """The system classes as kube-apiserver creates them."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": description,
            "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
        }
        for name, value, description in SYSTEM_PRIORITY_CLASSES
    ]


def default_class(classes: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The globalDefault class; of several (two writers racing), the one of lowest value, as kube picks."""
    defaults = [pc for pc in classes if pc.get("globalDefault") is True]
    return min(defaults, key=lambda pc: _value(pc)) if defaults else None


def _value(pc: dict[str, Any]) -> int:
    value = pc.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def admit_new_pod(
    spec: dict[str, Any],
    find: Callable[[str], dict[str, Any] | None],
    classes: Callable[[], Iterable[dict[str, Any]]],
) -> str | None:
    """Resolve a new pod's priority and preemption policy in place; the reason it is forbidden, if it is."""
    name = spec.get("priorityClassName") or ""
    if name:
        pc = find(str(name))
        if pc is None:
            return f"no PriorityClass with name {name} was found"
    else:
        pc = default_class(classes())
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    priority = _value(pc) if pc is not None else 0
    policy = (pc or {}).get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    for key, computed, what in (
        ("priority", priority, "the integer value of priority"),
        ("preemptionPolicy", policy, "the string value of PreemptionPolicy"),
    ):
        given = spec.get(key)
        if given is not None and given != computed:
            return (
                f"{what} ({given}) must not be provided in pod spec; "
                f"priority admission controller computed {computed} from the given PriorityClass name"
            )
        spec[key] = computed
    return None


def keep_priority(spec: dict[str, Any], old_spec: dict[str, Any]) -> None:
    """An update that leaves out the priority the pod was created with keeps it (the spec's rule then holds)."""
    for key in ("priority", "preemptionPolicy"):
        if spec.get(key) is None and old_spec.get(key) is not None:
            spec[key] = old_spec[key]


def default_priority_class(pc: dict[str, Any]) -> None:
    """scheduling/v1's default: a class preempts lower priorities unless it says Never; an unset value reads 0 (Go's
    int32 is never left out of the JSON)."""
    if not pc.get("preemptionPolicy"):
        pc["preemptionPolicy"] = PREEMPT_LOWER_PRIORITY
    if pc.get("value") is None:
        pc["value"] = 0


def priority_class_causes(pc: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
    """ValidatePriorityClass, and ValidatePriorityClassUpdate when `old` is given."""
    found: list[Cause] = []
    name = str((pc.get("metadata") or {}).get("name") or "")
    value = _value(pc)
    if name.startswith(SYSTEM_PREFIX):
        reason = _not_system_class(name, value, pc.get("globalDefault") is True)
        if reason:
            found.append(
                causes.forbidden(
                    "metadata.name",
                    f"Forbidden: priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. "
                    f"error: {reason}",
                )
            )
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        limit = f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
        found.append(causes.forbidden("value", f"Forbidden: {limit}"))
    policy = pc.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        listed = ", ".join(f'"{p}"' for p in PREEMPTION_POLICIES)
        found.append(
            causes.not_supported("preemptionPolicy", f'Unsupported value: "{policy}": supported values: {listed}')
        )
    if old is not None:
        if value != _value(old):
            found.append(causes.forbidden("value", "Forbidden: may not be changed in an update."))
        if policy != old.get("preemptionPolicy"):
            found.append(causes.invalid("preemptionPolicy", f'Invalid value: "{policy}": field is immutable'))
    return found


def _not_system_class(name: str, value: int, global_default: bool) -> str:
    for system_name, system_value, _ in SYSTEM_PRIORITY_CLASSES:
        if system_name == name:
            if value != system_value:
                return f"value of {name} PriorityClass must be {system_value}"
            if global_default:
                return f"globalDefault of {name} PriorityClass must be false"
            return ""
    return f"{name} is not a known system priority class"


def already_default(pc: dict[str, Any], classes: Iterable[dict[str, Any]], creating: bool) -> str | None:
    """The Priority plugin's rule of one globalDefault class: why `pc` may not be marked so, if it may not."""
    if pc.get("globalDefault") is not True:
        return None
    current = default_class(classes)
    if current is None:
        return None
    current_name = current["metadata"]["name"]
    if creating or current_name != (pc.get("metadata") or {}).get("name"):
        return f"PriorityClass {current_name} is already marked as default. Only one default can exist"
    return None
