"""kube-controller-manager's serviceaccounts-controller and root-ca-cert-publisher, in-process.

Every active namespace has a `default` ServiceAccount and a `kube-root-ca.crt` ConfigMap holding the cluster's CA,
which the ServiceAccount admission plugin's `kube-api-access-*` volume projects into pods. Either one deleted (or the
ConfigMap's data changed) is made again, as kube's controllers do; a terminating namespace is left alone.
"""

from __future__ import annotations

import logging
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.pod_defaults import DEFAULT_SERVICE_ACCOUNT
from pykubevirt.apiserver.namespace_queue import NamespaceQueue
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import Event

log = logging.getLogger("pykubevirt.apiserver.namespace_credentials")

ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
ROOT_CA_KEY = "ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the "
    "internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes "
    "clusters."
)
ACCOUNTS_USER = UserInfo("system:serviceaccount:kube-system:service-account-controller", ("system:serviceaccounts",))
PUBLISHER_USER = UserInfo("system:serviceaccount:kube-system:root-ca-cert-publisher", ("system:serviceaccounts",))


def root_ca_config_map(ca_pem: str) -> dict[str, Any]:
    """The `kube-root-ca.crt` ConfigMap as root-ca-cert-publisher writes it."""
    return {
        "metadata": {"name": ROOT_CA_CONFIG_MAP, "annotations": {DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}},
        "data": {ROOT_CA_KEY: ca_pem},
    }


class NamespaceCredentials:
    """Keeps each active namespace's default ServiceAccount and root CA ConfigMap, one namespace at a time."""

    def __init__(self, api: ObjectAPI, ca_pem: str) -> None:
        self.api = api
        self.ca_pem = ca_pem
        self.namespaces: Resource = api.registry.builtin("", "v1", "namespaces")
        self.accounts: Resource = api.registry.builtin("", "v1", "serviceaccounts")
        self.config_maps: Resource = api.registry.builtin("", "v1", "configmaps")
        # 403: the namespace began terminating meanwhile, and its objects may no longer be made.
        self.queue = NamespaceQueue("namespace credentials", quiet_codes=frozenset({403, 404}))
        for record in api.store.records(self.namespaces.collection):
            self.queue.add(str(record.value["metadata"]["name"]))
        api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        meta = event.value.get("metadata") or {}
        if event.collection == self.namespaces.collection:
            if event.type != "DELETED":
                self.queue.add(str(meta.get("name") or ""))
        elif event.collection == self.accounts.collection:
            if event.type == "DELETED" and meta.get("name") == DEFAULT_SERVICE_ACCOUNT:
                self.queue.add(str(meta.get("namespace") or ""))
        elif event.collection == self.config_maps.collection and meta.get("name") == ROOT_CA_CONFIG_MAP:
            if event.type == "DELETED" or not self._is_current(event.value):
                self.queue.add(str(meta.get("namespace") or ""))

    def _is_current(self, config_map: dict[str, Any]) -> bool:
        annotations = (config_map.get("metadata") or {}).get("annotations") or {}
        return (config_map.get("data") or {}) == {ROOT_CA_KEY: self.ca_pem} and DESCRIPTION_ANNOTATION in annotations

    async def run(self) -> None:
        """Process namespaces until cancelled; one failure never stops the controller."""
        await self.queue.run(self.sync)

    def sync(self, namespace: str) -> None:
        """Create what `namespace` lacks, and put back the CA ConfigMap's data and annotation if they changed."""
        ns = self.api.find(self.namespaces, None, namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp") or (ns.get("status") or {}).get("phase") != "Active":
            return
        if self.api.find(self.accounts, namespace, DEFAULT_SERVICE_ACCOUNT) is None:
            ctx = RequestContext(user=ACCOUNTS_USER, user_agent="kube-controller-manager")
            self.api.create(self.accounts, namespace, {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT}}, ctx)
            log.info("service account %s/%s created", namespace, DEFAULT_SERVICE_ACCOUNT)
        ctx = RequestContext(user=PUBLISHER_USER, user_agent="kube-controller-manager")
        current = self.api.find(self.config_maps, namespace, ROOT_CA_CONFIG_MAP)
        if current is None:
            self.api.create(self.config_maps, namespace, root_ca_config_map(self.ca_pem), ctx)
        elif not self._is_current(current):
            updated = copy_json(current)
            updated["data"] = {ROOT_CA_KEY: self.ca_pem}
            annotations = updated["metadata"].setdefault("annotations", {})
            annotations[DESCRIPTION_ANNOTATION] = ROOT_CA_DESCRIPTION
            self.api.update(self.config_maps, namespace, ROOT_CA_CONFIG_MAP, updated, ctx)
