"""CustomResourceDefinitions: serving a posted CRD's resources, and installing the extensions' CRDs at start."""

from __future__ import annotations

import logging
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.scale import ScaleSubresource, scale_path_causes
from pykubevirt.api.structural import structural_violations
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext
from pykubevirt.apiserver.resources import Resource

log = logging.getLogger("pykubevirt.apiserver.crds")

CRD_COLLECTION = "apiextensions.k8s.io/customresourcedefinitions"


def resources_of(crd: dict[str, Any]) -> list[Resource]:
    """One Resource per served version of a CRD."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    found = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        declared = version.get("subresources") or {}
        subresources = frozenset(declared.keys())
        scale = declared.get("scale")
        found.append(
            Resource(
                group=str(spec.get("group", "")),
                version=str(version["name"]),
                kind=str(names.get("kind", "")),
                plural=str(names.get("plural", "")),
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                schema=schema,
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                subresources=subresources,
                scale=ScaleSubresource.from_crd(scale) if isinstance(scale, dict) else None,
            )
        )
    return found


def crd_problems(crd: dict[str, Any]) -> list[dict[str, str]]:
    """Causes that make a CRD unacceptable (missing names, non-structural schemas)."""
    causes = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    name = str((crd.get("metadata") or {}).get("name", ""))
    for required in ("plural", "kind"):
        if not names.get(required):
            causes.append(
                {"reason": "FieldValueRequired", "message": "Required value", "field": f"spec.names.{required}"}
            )
    if not spec.get("group"):
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.group"})
    elif names.get("plural") and name != f"{names['plural']}.{spec['group']}":
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                "field": "metadata.name",
            }
        )
    if not spec.get("versions"):
        causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.versions"})
    for i, version in enumerate(spec.get("versions") or []):
        if not version.get("name"):
            # Serving the CRD (after it is stored) needs every version's name.
            causes.append(
                {"reason": "FieldValueRequired", "message": "Required value", "field": f"spec.versions[{i}].name"}
            )
        scale = (version.get("subresources") or {}).get("scale")
        if isinstance(scale, dict):
            causes += scale_path_causes(scale, f"spec.versions[{i}].subresources.scale")
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is not None:
            for problem in structural_violations(schema):
                causes.append(
                    {
                        "reason": "FieldValueInvalid",
                        "message": problem,
                        "field": f"spec.versions[{i}].schema.openAPIV3Schema",
                    }
                )
    return causes


class CRDController:
    """Keeps the registry in step with the stored CRDs and fills their status."""

    def __init__(self, api: ObjectAPI) -> None:
        self.api = api
        api.on_crd_change.append(self._changed)

    def load_stored(self) -> None:
        for record in self.api.store.records(CRD_COLLECTION):
            try:
                resources = resources_of(record.value)
            except Exception:
                # Stored before CRDs were validated as they are now: serve the rest rather than fail to start.
                log.exception("not serving the stored CRD %s", record.key)
                continue
            for resource in resources:
                self.api.registry.add(resource)

    def _register(self, crd: dict[str, Any]) -> None:
        for resource in resources_of(crd):
            self.api.registry.add(resource)

    def _unregister(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        for version in spec.get("versions") or []:
            self.api.registry.remove(
                str(spec.get("group", "")), str(version.get("name")), str((spec.get("names") or {}).get("plural"))
            )

    def _changed(self, crd: dict[str, Any], action: str) -> None:
        if action == "delete":
            self._remove_instances(crd)
            self._unregister(crd)
            return
        if action == "update":
            self._unregister(crd)
        self._register(crd)
        self._set_established(crd)

    def _remove_instances(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        collection = f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}"
        for record in self.api.store.records(collection):
            self.api.store.delete(collection, record.key)

    def _set_established(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        status = {
            "acceptedNames": copy_json(spec.get("names") or {}),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }
        current = crd.get("status") or {}
        if (
            current.get("acceptedNames") == status["acceptedNames"]
            and current.get("storedVersions") == status["storedVersions"]
        ):
            return
        key = str(crd["metadata"]["name"])
        record = self.api.store.get(CRD_COLLECTION, key)
        if record is None:
            return
        updated = copy_json(record.value)
        updated["status"] = status
        self.api.store.update(CRD_COLLECTION, key, updated, expected_revision=record.revision)

    def install_crds(self, manifests: list[dict[str, Any]]) -> None:
        """Create or update the CRDs the server's extensions bring (KubeVirt's are identical to deploy/crds/)."""
        crd_resource = self.api.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        if crd_resource is None:
            raise RuntimeError("the CRD resource must be registered first")
        ctx = RequestContext(user=SYSTEM_USER)
        for manifest in manifests:
            name = str(manifest["metadata"]["name"])
            existing = self.api.find(crd_resource, None, name)
            if existing is None:
                self.api.create(crd_resource, None, copy_json(manifest), ctx)
                log.info("installed CRD %s", name)
            elif existing.get("spec") != manifest["spec"]:
                updated = copy_json(manifest)
                updated["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                self.api.update(crd_resource, None, name, updated, ctx)
                log.info("updated CRD %s", name)


def validate_crd(crd: dict[str, Any]) -> None:
    causes = crd_problems(crd)
    if causes:
        name = str((crd.get("metadata") or {}).get("name", ""))
        raise errors.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)
