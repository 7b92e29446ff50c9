"""KubeVirt's VirtualMachineExport admitter through the admission chain: the source on create, a frozen spec after."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.chain import UPDATE, validate
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.export import EXPORT_WEBHOOK


def export(kind: str, name: str = "src", api_group: str | None = None, **spec: Any) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind, "name": name}
    if api_group is not None:
        source["apiGroup"] = api_group
    return {
        "apiVersion": "export.kubevirt.io/v1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": "e", "namespace": "default"},
        "spec": {"source": source, **spec},
    }


def causes(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    try:
        validate(obj, AdmissionContext(), operation=UPDATE if old else "CREATE", old=old)
    except AdmissionRejected as rejected:
        assert rejected.webhook == EXPORT_WEBHOOK
        return [(c.field, c.message) for c in rejected.causes]
    return []


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (export("PersistentVolumeClaim"), []),
        (export("PersistentVolumeClaim", api_group=""), []),
        (export("VirtualMachine", api_group="kubevirt.io"), []),
        (export("VirtualMachineSnapshot", api_group="snapshot.kubevirt.io"), []),
        (
            export("PersistentVolumeClaim", name="", api_group="kubevirt.io"),
            [
                ("spec.source.name", "PVC name must not be empty"),
                ("spec.source.APIGroup", "PVC API group must be missing or blank"),
            ],
        ),
        (export("VirtualMachine"), [("spec.source.APIGroup", "VM API group must be kubevirt.io")]),
        (
            export("VirtualMachine", name="", api_group="kubevirt.io"),
            [("spec.source.name", "Virtual Machine name must not be empty")],
        ),
        (
            export("VirtualMachineSnapshot", api_group="kubevirt.io"),
            [("spec.source.APIGroup", "VMSnapshot API group must be snapshot.kubevirt.io")],
        ),
        (
            export("VirtualMachineBackup", name=""),
            [
                ("spec.source.name", "VirtualMachineBackup name must not be empty"),
                ("spec.source.APIGroup", "VirtualMachineBackup API group must be backup.kubevirt.io"),
            ],
        ),
        (export("Pod"), [("spec.source.kind", "invalid kind")]),
        (
            export("VirtualMachineTemplate", api_group="template.kubevirt.io"),
            [
                (
                    "spec.source.kind",
                    "VirtualMachineTemplate source requires the OCIExport feature gate and virt-template "
                    "deployment to be enabled",
                )
            ],
        ),
    ],
)
def test_create_checks_the_source_as_kubevirt_does(obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert causes(obj) == expected


def test_the_spec_is_frozen_after_create_but_metadata_and_status_may_change() -> None:
    old = export("PersistentVolumeClaim", ttlDuration="1h")
    relabelled = export("PersistentVolumeClaim", ttlDuration="1h")
    relabelled["metadata"]["labels"] = {"a": "b"}
    relabelled["status"] = {"phase": "Ready"}
    assert causes(relabelled, old) == []
    longer = export("PersistentVolumeClaim", ttlDuration="2h")
    assert causes(longer, old) == [("spec", "spec in immutable after creation")]
