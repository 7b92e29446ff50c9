"""A receiver VMI (`runStrategy: WaitAsReceiver`): it waits in WaitingForSync, with no launcher pod of its own, for a
migration to bring its domain.

Upstream: pkg/virt-controller/watch/vmi/lifecycle.go. The VM controller creates the VMI annotated
`kubevirt.io/create-migration-target: "true"`; until a migration labels it with its target node, the VMI controller
starts nothing for it. The decentralized (cross-cluster) migration that would fill it is out of scope here.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import constants as c


def is_receiver(vmi: dict[str, Any]) -> bool:
    """KubeVirt's IsMigrationTarget: created to receive a migration."""
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    return annotations.get(c.CREATE_MIGRATION_TARGET_ANNOTATION) == "true"


def waits_for_sync(vmi: dict[str, Any]) -> bool:
    """A receiver no migration has claimed yet (no target node label): no pod, phase WaitingForSync."""
    labels = (vmi.get("metadata") or {}).get("labels") or {}
    return is_receiver(vmi) and not labels.get(c.MIGRATION_TARGET_NODE_NAME_LABEL)


def release_waiting_finalizers(vmi: dict[str, Any], owner_vm_exists: bool) -> None:
    """A receiver deleted while it waits has nothing to clean up: its finalizers go (the VM's once the VM is gone)."""
    finalizers = vmi["metadata"].setdefault("finalizers", [])
    for finalizer in (c.LEGACY_VMI_FINALIZER, c.VMI_FINALIZER):
        if finalizer in finalizers:
            finalizers.remove(finalizer)
    if not owner_vm_exists and c.VM_CONTROLLER_FINALIZER in finalizers:
        finalizers.remove(c.VM_CONTROLLER_FINALIZER)
