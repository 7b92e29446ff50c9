"""VMI metadata: reserved kubevirt.io labels and the annotations that need a feature gate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported
from pykubevirt.api.constants import RESERVED_VMI_LABELS
from pykubevirt.api.json_lookup import as_map

IGNITION_ANNOTATION = "kubevirt.io/ignitiondata"
SIDECAR_ANNOTATION = "hooks.kubevirt.io/hookSidecars"


def reserved_labels(labels: Any) -> dict[str, Any]:
    return {k: v for k, v in as_map(labels).items() if k in RESERVED_VMI_LABELS}


def validate_vmi_metadata(
    field: FieldPath, metadata: Mapping[str, Any], ctx: AdmissionContext, *, is_kubevirt: bool
) -> list[Cause]:
    """ValidateVirtualMachineInstanceMetadata; `field` is the metadata path."""
    causes: list[Cause] = []
    annotations = as_map(metadata.get("annotations"))
    if not is_kubevirt and reserved_labels(metadata.get("labels")):
        causes.append(
            not_supported(
                str(field.child("labels")),
                "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
            )
        )
    if annotations.get(IGNITION_ANNOTATION) and not ctx.config.gate_enabled("ExperimentalIgnitionSupport"):
        causes.append(
            invalid(
                str(field.child("annotations")),
                "ExperimentalIgnitionSupport feature gate is not enabled in kubevirt-config, invalid entry "
                f"{field.child('annotations', IGNITION_ANNOTATION)}",
            )
        )
    if annotations.get(SIDECAR_ANNOTATION) and not ctx.config.gate_enabled("Sidecar"):
        causes.append(
            invalid(
                str(field.child("annotations")),
                "sidecar feature gate is not enabled in kubevirt-config, invalid entry "
                f"{field.child('annotations', SIDECAR_ANNOTATION)}",
            )
        )
    return causes
