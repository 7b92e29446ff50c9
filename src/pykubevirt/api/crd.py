"""CustomResourceDefinition manifests generated from the API model."""

from __future__ import annotations

from typing import Any

import yaml

from pykubevirt.api.kinds import ALL_KINDS, KindSpec


def crd_manifest(spec: KindSpec) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CRD of one kind."""
    names: dict[str, Any] = {"kind": spec.kind, "plural": spec.plural, "singular": spec.singular}
    names["listKind"] = f"{spec.kind}List"
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    version: dict[str, Any] = {
        "name": spec.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": spec.schema},
    }
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [c.to_crd() for c in spec.printer_columns]
    subresources: dict[str, Any] = {}
    if spec.status_subresource:
        subresources["status"] = {}
    if spec.scale is not None:
        subresources["scale"] = spec.scale.to_crd()
    if subresources:
        version["subresources"] = subresources
    versions = [version]
    for older in spec.older_versions:
        # The same schema object: the CRD's versions differ in name only, as KubeVirt's do.
        served: dict[str, Any] = {**version, "name": older.name, "storage": False}
        if older.deprecation_warning:
            served["deprecated"] = True
            served["deprecationWarning"] = older.deprecation_warning
        versions.append(served)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.crd_name, "labels": {"app.kubernetes.io/part-of": "pykubevirt"}},
        "spec": {
            "group": spec.group,
            "names": names,
            "scope": "Namespaced" if spec.namespaced else "Cluster",
            "versions": versions,
        },
    }


class _NoAliasDumper(yaml.SafeDumper):
    """Schemas reuse nodes; YAML anchors would make the files hard to read and diff."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False, width=120)


def crd_file_name(spec: KindSpec) -> str:
    return f"{spec.crd_name}.yaml"


def all_crd_files() -> dict[str, str]:
    """File name → YAML text for every CRD, as committed under deploy/crds/."""
    return {crd_file_name(spec): to_yaml(crd_manifest(spec)) for spec in ALL_KINDS}
