"""The built-in Kubernetes kinds the embedded server serves, with minimal schemas that keep every field."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from pykubevirt.api.pod_qos import qos_class
from pykubevirt.apiserver.authorization.rbac_printers import binding_table, role_table
from pykubevirt.apiserver.disruption_budget import pdb_table
from pykubevirt.apiserver.printers import (
    configmap_table,
    controllerrevision_table,
    crd_table,
    event_table,
    lease_table,
    namespace_table,
    node_table,
    pod_table,
    secret_table,
    serviceaccount_table,
)
from pykubevirt.apiserver.resources import Resource, TableRows
from pykubevirt.apiserver.service_printers import endpoints_table, endpointslice_table, service_table
from pykubevirt.apiserver.storage_printers import pv_table, pvc_table, storageclass_table

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext

# Built-in objects are stored as sent: the real API server knows their schemas, we only need to keep them intact.
OPEN_SCHEMA = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

EVENT_TTL_SECONDS = 3600
# The finalizer kube-apiserver gives every namespace; the namespace controller removes it once the namespace is empty.
NAMESPACE_FINALIZER = "kubernetes"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

BUILTIN_RESOURCES: tuple[Resource, ...] = (
    Resource(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        True,
        OPEN_SCHEMA,
        short_names=("pdb",),
        subresources=frozenset({"status"}),
        builtin=True,
        table=pdb_table,
    ),
    Resource(
        "",
        "v1",
        "Namespace",
        "namespaces",
        "namespace",
        False,
        OPEN_SCHEMA,
        short_names=("ns",),
        subresources=frozenset({"status", "finalize"}),
        builtin=True,
        table=namespace_table,
        selectable_fields=("status.phase",),
    ),
    Resource(
        "",
        "v1",
        "Node",
        "nodes",
        "node",
        False,
        OPEN_SCHEMA,
        short_names=("no",),
        subresources=frozenset({"status"}),
        builtin=True,
        table=node_table,
        selectable_fields=("spec.unschedulable",),
    ),
    Resource(
        "",
        "v1",
        "Pod",
        "pods",
        "pod",
        True,
        OPEN_SCHEMA,
        short_names=("po",),
        categories=("all",),
        subresources=frozenset({"status", "binding", "log", "eviction", "exec", "portforward"}),
        builtin=True,
        table=pod_table,
        selectable_fields=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    Resource(
        "",
        "v1",
        "Event",
        "events",
        "event",
        True,
        OPEN_SCHEMA,
        short_names=("ev",),
        builtin=True,
        table=event_table,
        ttl_seconds=EVENT_TTL_SECONDS,
        selectable_fields=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    Resource(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        "configmap",
        True,
        OPEN_SCHEMA,
        short_names=("cm",),
        builtin=True,
        table=configmap_table,
    ),
    Resource(
        "",
        "v1",
        "Secret",
        "secrets",
        "secret",
        True,
        OPEN_SCHEMA,
        builtin=True,
        table=secret_table,
        selectable_fields=("type",),
    ),
    Resource(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        True,
        OPEN_SCHEMA,
        short_names=("sa",),
        subresources=frozenset({"token"}),
        builtin=True,
        table=serviceaccount_table,
    ),
    Resource(
        "",
        "v1",
        "Service",
        "services",
        "service",
        True,
        OPEN_SCHEMA,
        short_names=("svc",),
        categories=("all",),
        subresources=frozenset({"status"}),
        builtin=True,
        table=service_table,
    ),
    Resource(
        "",
        "v1",
        "Endpoints",
        "endpoints",
        "endpoints",
        True,
        OPEN_SCHEMA,
        short_names=("ep",),
        builtin=True,
        table=endpoints_table,
    ),
    Resource(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        True,
        OPEN_SCHEMA,
        builtin=True,
        table=endpointslice_table,
    ),
    Resource(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        True,
        OPEN_SCHEMA,
        short_names=("pvc",),
        subresources=frozenset({"status"}),
        builtin=True,
        table=pvc_table,
    ),
    Resource(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        "persistentvolume",
        False,
        OPEN_SCHEMA,
        short_names=("pv",),
        subresources=frozenset({"status"}),
        builtin=True,
        table=pv_table,
    ),
    Resource(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        "controllerrevision",
        True,
        OPEN_SCHEMA,
        builtin=True,
        table=controllerrevision_table,
    ),
    Resource(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        "lease",
        True,
        OPEN_SCHEMA,
        builtin=True,
        table=lease_table,
    ),
    Resource(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        "storageclass",
        False,
        OPEN_SCHEMA,
        short_names=("sc",),
        builtin=True,
        table=storageclass_table,
    ),
    Resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        False,
        OPEN_SCHEMA,
        short_names=("crd", "crds"),
        subresources=frozenset({"status"}),
        builtin=True,
        table=crd_table,
    ),
)

RBAC_GROUP = "rbac.authorization.k8s.io"


def _rbac(kind: str, namespaced: bool, table: TableRows) -> Resource:
    plural = kind.lower() + "s"
    return Resource(RBAC_GROUP, "v1", kind, plural, kind.lower(), namespaced, OPEN_SCHEMA, builtin=True, table=table)


def _review(group: str, kind: str, namespaced: bool = False) -> Resource:
    """A create-only kind answered on the spot (access reviews, whoami); nothing is stored."""
    plural = kind.lower() + "s"
    return Resource(group, "v1", kind, plural, kind.lower(), namespaced, OPEN_SCHEMA, verbs=("create",), builtin=True)


AUTHORIZATION_RESOURCES: tuple[Resource, ...] = (
    _rbac("ClusterRole", False, role_table),
    _rbac("Role", True, role_table),
    _rbac("ClusterRoleBinding", False, binding_table),
    _rbac("RoleBinding", True, binding_table),
    _review("authorization.k8s.io", "SubjectAccessReview"),
    _review("authorization.k8s.io", "SelfSubjectAccessReview"),
    _review("authorization.k8s.io", "LocalSubjectAccessReview", namespaced=True),
    _review("authorization.k8s.io", "SelfSubjectRulesReview"),
    _review("authentication.k8s.io", "SelfSubjectReview"),
    _review("authentication.k8s.io", "TokenReview"),
)

# Namespaces that exist from the first start, as in a fresh cluster.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def fold_string_data(secret: dict[str, Any]) -> None:
    """stringData is write-only: its values, base64-encoded, replace data's (Convert_v1_Secret_To_core_Secret)."""
    string_data = secret.get("stringData")
    if not isinstance(string_data, dict) or not isinstance(secret.get("data") or {}, dict):
        return  # not a map: schema validation refuses the Secret with kube-apiserver's message
    del secret["stringData"]
    data = dict(secret.get("data") or {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    secret["data"] = data


class BuiltinDefaults:
    """What kube-apiserver's strategies and defaulting set on built-in kinds before they are stored.

    Namespaces start Active with the `kubernetes` finalizer (namespace strategy PrepareForCreate) that updates keep
    (PrepareForUpdate), and are labelled with their name; a new Pod's status is Pending with its QoS class; a Secret
    without a type is Opaque (SetDefaults_Secret) and its stringData is folded into data. Runs first in the admission
    chain, as built-in defaulting does.
    """

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and not resource.group and resource.kind in ("Namespace", "Secret", "Pod")

    def mutate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> dict[str, Any]:
        if resource.kind == "Namespace":
            # Every namespace carries its name as a label, so selectors can pick namespaces by name.
            name = str((obj.get("metadata") or {}).get("name", ""))
            obj.setdefault("metadata", {}).setdefault("labels", {})[NAMESPACE_NAME_LABEL] = name
        if resource.kind == "Pod" and operation == "CREATE":
            # The pod strategy: a new pod has no status but Pending and its QoS class; nodes report the rest.
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
        elif resource.kind == "Namespace" and operation == "CREATE":
            spec = obj.setdefault("spec", {})
            finalizers = list(spec.get("finalizers") or [])
            if NAMESPACE_FINALIZER not in finalizers:
                finalizers.append(NAMESPACE_FINALIZER)
            spec["finalizers"] = finalizers
            obj["status"] = {"phase": "Active"}
        elif resource.kind == "Namespace" and old is not None:
            # Only the namespace controller changes spec.finalizers (through /finalize).
            obj["spec"] = dict(obj.get("spec") or {}, finalizers=list((old.get("spec") or {}).get("finalizers") or []))
        elif resource.kind == "Secret":
            fold_string_data(obj)
            if not obj.get("type"):
                obj["type"] = "Opaque"
        return obj

    def validate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> list[str]:
        return []
