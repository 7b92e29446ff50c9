"""KubeVirt's namespace and its components' service accounts (virt-operator's names), which RBAC binds."""

from __future__ import annotations

from typing import Final

from pykubevirt.apiserver.security import service_account_user

KUBEVIRT_NAMESPACE: Final = "kubevirt"
CONTROLLER_USER: Final = service_account_user(KUBEVIRT_NAMESPACE, "kubevirt-controller")
HANDLER_USER: Final = service_account_user(KUBEVIRT_NAMESPACE, "kubevirt-handler")
VIRT_API_USER: Final = service_account_user(KUBEVIRT_NAMESPACE, "kubevirt-apiserver")
# Component name (its kubeconfig's file name in the API server's data dir) → its identity.
COMPONENTS: Final = {"virt-controller": CONTROLLER_USER, "virt-handler": HANDLER_USER, "virt-api": VIRT_API_USER}
