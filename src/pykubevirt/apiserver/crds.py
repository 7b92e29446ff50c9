"""CustomResourceDefinitions: serving a posted CRD's resources, and installing the extensions' CRDs at start."""

from __future__ import annotations

import json
import logging
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.name_validation import dns1035_label_errors
from pykubevirt.api.scale import ScaleSubresource, scale_path_causes
from pykubevirt.api.schema import Schema
from pykubevirt.api.structural import structural_violations
from pykubevirt.apiserver.discovery import version_sort_key
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext
from pykubevirt.apiserver.resources import Resource

log = logging.getLogger("pykubevirt.apiserver.crds")

CRD_COLLECTION = "apiextensions.k8s.io/customresourcedefinitions"


def resources_of(crd: dict[str, Any]) -> list[Resource]:
    """One Resource per served version of a CRD."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = spec.get("versions") or []
    storage = next((str(v["name"]) for v in versions if v.get("storage")), "")
    schemas: list[Schema] = []
    found = []
    for version in versions:
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        # Versions that differ only in name (KubeVirt's v1 and v1alpha3) share one schema object: it is compiled
        # once, and a write through either keeps the other's knowledge of what was checked against it.
        schema = next((known for known in schemas if known == schema), schema)
        schemas.append(schema)
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
                storage_version=storage,
                deprecation_warning=_deprecation_warning(spec, version),
            )
        )
    return found


def _deprecation_warning(spec: dict[str, Any], version: dict[str, Any]) -> str:
    """The Warning a deprecated version's requests get: its own, or kube's default naming a newer served version."""
    if not version.get("deprecated"):
        return ""
    if version.get("deprecationWarning") is not None:
        return str(version["deprecationWarning"])
    name, kind, group = str(version["name"]), str((spec.get("names") or {}).get("kind", "")), spec.get("group", "")
    message = f"{group}/{name} {kind} is deprecated"
    newer = [
        str(v["name"])
        for v in spec.get("versions") or []
        if v.get("served") and not v.get("deprecated") and version_sort_key(str(v["name"])) < version_sort_key(name)
    ]
    if newer:
        message += f"; use {group}/{min(newer, key=version_sort_key)} {kind}"
    return message


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
    else:
        causes += _version_set_causes(spec["versions"])
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


def _version_set_causes(versions: list[dict[str, Any]]) -> list[dict[str, str]]:
    """kube's rules for a CRD's versions together: DNS-1035 names, each once, exactly one storage version."""
    causes = []
    for i, version in enumerate(versions):
        name = version.get("name")
        if name:
            message = ",".join(dns1035_label_errors(str(name)))
            if message:
                causes.append(
                    {
                        "reason": "FieldValueInvalid",
                        "message": f"Invalid value: {json.dumps(name)}: {message}",
                        "field": f"spec.versions[{i}].name",
                    }
                )
    # kube prints the whole list of versions as the value; their names say the same here.
    names = [str(v.get("name", "")) for v in versions]
    shown = json.dumps(names)
    if len(set(names)) != len(names):
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {shown}: must contain unique version names",
                "field": "spec.versions",
            }
        )
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {shown}: must have exactly one version marked as storage version",
                "field": "spec.versions",
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
        spec = crd.get("spec") or {}
        if (spec.get("conversion") or {}).get("strategy") == "Webhook" and len(spec.get("versions") or []) > 1:
            log.warning(
                "serving the CRD %s without its conversion webhook: its versions show the stored object as it is",
                (crd.get("metadata") or {}).get("name"),
            )
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
            # kube adds the storage version to those ever stored and never drops one itself (objects may remain).
            "storedVersions": list(
                dict.fromkeys(
                    [
                        *((crd.get("status") or {}).get("storedVersions") or []),
                        *(v["name"] for v in spec.get("versions") or [] if v.get("storage")),
                    ]
                )
            ),
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
