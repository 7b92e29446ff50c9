"""deploy/rbac/rbac.yaml: KubeVirt's RBAC for a real cluster, generated from the policy the embedded server ships.

One source for both: the embedded API server bootstraps `policy/*.yaml`, a cluster gets the same objects through
`kubectl apply -k deploy/`. Regenerate with `make crds` (`python -m pykubevirt.virtapi.deploy_rbac`).
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any

import yaml

from pykubevirt.api.crd import to_yaml

POLICY_FILES = ("kubevirt-roles.yaml", "components.yaml")
DEPLOY_FILE = "deploy/rbac/rbac.yaml"
# Only the embedded cluster runs these (virt-controller --embedded-storage): a real cluster's PV controller and
# CSI provisioners do that work under their own identities.
EMBEDDED_ONLY = frozenset({"pykubevirt:storage-controller"})
_HEADER = (
    "# Generated from src/pykubevirt/virtapi/policy/{kubevirt-roles,components}.yaml by `make crds`; do not edit.\n"
    "# KubeVirt's service accounts, their roles, and the aggregated kubevirt.io:view/edit/admin ClusterRoles.\n"
)


def policy_documents() -> list[dict[str, Any]]:
    """The roles and bindings of the shipped policy that a real cluster needs, in file order."""
    folder = resources.files("pykubevirt.virtapi") / "policy"
    found: list[dict[str, Any]] = []
    for name in POLICY_FILES:
        found += [d for d in yaml.safe_load_all((folder / name).read_text()) if d]
    return [d for d in found if d["metadata"]["name"] not in EMBEDDED_ONLY]


def service_accounts(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ServiceAccount for every service-account subject the bindings name (as virt-operator creates them)."""
    named = sorted(
        {
            (subject["namespace"], subject["name"])
            for document in documents
            for subject in document.get("subjects", [])
            if subject["kind"] == "ServiceAccount"
        }
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kubevirt.io": ""}},
        }
        for namespace, name in named
    ]


def render() -> str:
    """The text of deploy/rbac/rbac.yaml."""
    documents = policy_documents()
    return _HEADER + "---\n".join(to_yaml(d) for d in [*service_accounts(documents), *documents])


if __name__ == "__main__":
    sys.stdout.write(render())
