"""VirtualMachineSnapshot and VirtualMachineRestore manifests, as a user writes them, for the tests that make them."""

from __future__ import annotations

from typing import Any


def vm_snapshot(name: str, vm: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}, **spec},
    }


def vm_restore(name: str, vm: str, snapshot: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineRestore",
        "metadata": {"name": name},
        "spec": {
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm},
            "virtualMachineSnapshotName": snapshot,
            **spec,
        },
    }
