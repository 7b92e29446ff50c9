"""Admitting a manifest without a server: strict schema check, schema validation, then the admission chain.

This is what `pykubevirt validate` runs; its verdicts match what the API server answers for the same document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.chain import mutate
from pykubevirt.admission.chain import validate as validate_admission
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.field_hints import strict_decoding_error
from pykubevirt.api.kinds import OUR_GROUPS, KindSpec, kind_for
from pykubevirt.api.structural import unknown_fields
from pykubevirt.api.structural import validate as validate_schema


@dataclass(frozen=True, slots=True)
class Verdict:
    """The admitted object (defaults applied) or the rejection message, plus warnings."""

    object: dict[str, Any] | None
    error: str = ""
    code: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.error


def schema_invalid_message(spec: KindSpec, name: str, details: list[str]) -> str:
    """kube-apiserver's 422 message for a custom resource failing its schema."""
    body = details[0] if len(details) == 1 else "[" + ", ".join(details) + "]"
    return f'{spec.kind}.{spec.group} "{name}" is invalid: {body}'


def check_document(doc: Any, ctx: AdmissionContext, *, strict: bool = True) -> Verdict:
    """Admit one document as a CREATE; documents of other API groups pass through unchanged."""
    if not isinstance(doc, dict):
        return Verdict(None, f"expected an object, got {type(doc).__name__}", 400)
    api_version = doc.get("apiVersion")
    kind = doc.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        return Verdict(None, "Object 'Kind' is missing" if not kind else "Object 'apiVersion' is missing", 400)
    group, _, version = api_version.rpartition("/")
    spec = kind_for(api_version, kind)
    if spec is None:
        if group in OUR_GROUPS:
            return Verdict(None, f'no matches for kind "{kind}" in version "{api_version}"', 404)
        return Verdict(doc)
    if strict:
        unknown = unknown_fields(doc, spec.schema)
        if unknown:
            return Verdict(None, strict_decoding_error(kind, version, unknown), 400)
    name = str((doc.get("metadata") or {}).get("name") or "")
    # kube-apiserver's order: mutating webhooks, then the CRD schema, then validating webhooks.
    try:
        mutated = mutate(doc, ctx)
        errors = validate_schema(mutated, spec.schema)
        if errors:
            return Verdict(None, schema_invalid_message(spec, name, [e.message for e in errors]), 422)
        warnings = validate_admission(mutated, ctx)
    except AdmissionRejected as rejected:
        status = rejected.status()
        return Verdict(None, str(status["message"]), int(status.get("code", 422)))
    return Verdict(mutated, warnings=warnings)
