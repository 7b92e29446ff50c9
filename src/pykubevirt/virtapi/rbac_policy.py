"""KubeVirt's RBAC for the embedded API server: its user-facing roles and its components' least-privilege roles,
and CDI's user-facing roles for the embedded CDI.

virt-operator (and cdi-operator) install these on a real cluster (pkg/virt-operator/resource/generate/rbac); embedded,
the virt-api extension hands them to the API server's bootstrap policy.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from pykubevirt.apiserver.authorization.bootstrap_roles import load_policy

POLICY_FILES = ("kubevirt-roles.yaml", "components.yaml", "cdi-roles.yaml")


@cache
def kubevirt_policy() -> tuple[dict[str, Any], ...]:
    """`kubevirt.io:view/edit/admin`, the roles and bindings of virt-controller, virt-handler and virt-api, and
    `cdi.kubevirt.io:view/edit/admin`."""
    return load_policy(resources.files("pykubevirt.virtapi") / "policy", POLICY_FILES)
