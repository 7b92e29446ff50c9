"""The VirtualMachineInstance mutating webhook: defaults, finalizer and initial status on CREATE (§3.1)."""

from __future__ import annotations

import copy
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import VMI_MUTATOR_WEBHOOK, MutationDenied, as_list, now, obj
from pykubevirt.admission.defaults.presets import apply_presets
from pykubevirt.admission.defaults.serialization import (
    add_struct_artefacts,
    canonicalize_vmi_spec,
    canonicalize_vmi_status,
)
from pykubevirt.admission.defaults.vmi_spec import set_vmi_defaults, supports_pcie_hotplug
from pykubevirt.api import constants as c

NON_ROOT_USER = 107
ROOT_GATE = "Root"


def set_pci_topology_version(metadata: dict[str, Any]) -> None:
    """New objects get the v3 PCI topology; an annotation already present is kept."""
    annotations = obj(metadata, "annotations")
    if annotations is not None and c.PCI_TOPOLOGY_VERSION_ANNOTATION not in annotations:
        annotations[c.PCI_TOPOLOGY_VERSION_ANNOTATION] = c.PCI_TOPOLOGY_VERSION


def add_vmi_finalizer(metadata: dict[str, Any]) -> None:
    """Add the foreground-delete finalizer once, replacing the legacy unqualified name."""
    finalizers = as_list(metadata.get("finalizers"))
    kept = [f for f in finalizers if f != c.LEGACY_VMI_FINALIZER]
    if c.VMI_FINALIZER not in kept:
        kept.append(c.VMI_FINALIZER)
    metadata["finalizers"] = kept


def _mutate_create(vmi: dict[str, Any], ctx: AdmissionContext) -> None:
    apply_presets(vmi, ctx)
    set_vmi_defaults(vmi, ctx)
    spec: dict[str, Any] = vmi["spec"]
    add_struct_artefacts(spec)
    canonicalize_vmi_spec(spec)
    metadata = obj(vmi, "metadata")
    if metadata is not None:
        if supports_pcie_hotplug(spec):
            set_pci_topology_version(metadata)
        add_vmi_finalizer(metadata)
    status = obj(vmi, "status")
    if status is not None:
        _set_initial_status(status, ctx)


def _set_initial_status(status: dict[str, Any], ctx: AdmissionContext) -> None:
    """Pending with its transition time, the non-root runtime user, and the Go struct's always-present parts."""
    if not ctx.config.gate_enabled(ROOT_GATE):
        status["runtimeUser"] = NON_ROOT_USER
    else:
        status.setdefault("runtimeUser", 0)
    status["phase"] = c.PHASE_PENDING
    transitions = status.get("phaseTransitionTimestamps")
    transitions = list(transitions) if isinstance(transitions, list) else []
    transitions.append({"phase": c.PHASE_PENDING, "phaseTransitionTimestamp": now(ctx)})
    status["phaseTransitionTimestamps"] = transitions
    if status.get("guestOSInfo") is None:
        status["guestOSInfo"] = {}
    canonicalize_vmi_status(status)


def _mutate_update(vmi: dict[str, Any], ctx: AdmissionContext, old: dict[str, Any] | None) -> None:
    """Status edits by anyone but KubeVirt's service accounts are reverted."""
    if old is None or ctx.is_kubevirt_service_account():
        return
    old_status = old.get("status") or {}
    if (vmi.get("status") or {}) != old_status:
        vmi["status"] = copy.deepcopy(old_status)


def mutate_vmi(
    vmi: dict[str, Any], ctx: AdmissionContext, *, operation: str, old: dict[str, Any] | None = None
) -> None:
    """Apply the VMI mutator in place; `old` is the stored object on UPDATE.

    Raises MutationDenied (webhook name set) when defaults cannot be applied, e.g. a forbidden pod binding.
    """
    try:
        if operation == "CREATE":
            _mutate_create(vmi, ctx)
        elif operation == "UPDATE":
            _mutate_update(vmi, ctx, old)
    except MutationDenied as denied:
        denied.webhook = denied.webhook or VMI_MUTATOR_WEBHOOK
        raise
