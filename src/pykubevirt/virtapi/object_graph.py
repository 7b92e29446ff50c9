"""The `objectgraph` subresource: what a VM or VMI depends on, as a tree of typed references.

As KubeVirt's ObjectGraph (pkg/virt-api/rest/objectgraph.go, behind the ObjectGraph feature gate): the VMI and its
launcher pod, the instancetype and preference with their revisions, access-credential secrets, each volume's
DataVolume and claim, ConfigMap, Secret or ServiceAccount, cloud-init secrets, and Multus networks. Each node is
labelled `kubevirt.io/dependency-type` (compute, storage, config, network); instancetypes, preferences and networks
are optional. Not built: the backend-storage claim (persistent TPM/EFI) KubeVirt lists too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.label_selectors import LabelSelector, SelectorError, label_selector_from_dict
from pykubevirt.virtapi.options import decode_body

DEPENDENCY_LABEL = "kubevirt.io/dependency-type"
GATE_DISABLED = "ObjectGraph feature gate not enabled: Unable to return object graph."

Node = dict[str, Any]

GROUP_KINDS = {
    "virtualmachines": ("kubevirt.io", "VirtualMachine"),
    "virtualmachineinstances": ("kubevirt.io", "VirtualMachineInstance"),
    "virtualmachineinstancetypes": ("instancetype.kubevirt.io", "VirtualMachineInstancetype"),
    "virtualmachineclusterinstancetypes": ("instancetype.kubevirt.io", "VirtualMachineClusterInstancetype"),
    "virtualmachinepreferences": ("instancetype.kubevirt.io", "VirtualMachinePreference"),
    "virtualmachineclusterpreferences": ("instancetype.kubevirt.io", "VirtualMachineClusterPreference"),
    "datavolumes": ("cdi.kubevirt.io", "DataVolume"),
    "controllerrevisions": ("apps", "ControllerRevision"),
    "configmaps": ("", "ConfigMap"),
    "persistentvolumeclaims": ("", "PersistentVolumeClaim"),
    "serviceaccounts": ("", "ServiceAccount"),
    "secrets": ("", "Secret"),
    "pods": ("", "Pod"),
    "networkattachmentdefinitions": ("k8s.cni.cncf.io", "NetworkAttachmentDefinition"),
}
_DEPENDENCY = {
    "datavolumes": "storage",
    "persistentvolumeclaims": "storage",
    "configmaps": "config",
    "secrets": "config",
    "serviceaccounts": "config",
    "controllerrevisions": "config",
    "virtualmachineinstancetypes": "config",
    "virtualmachineclusterinstancetypes": "config",
    "virtualmachinepreferences": "config",
    "virtualmachineclusterpreferences": "config",
    "networkattachmentdefinitions": "network",
}


def graph_node(
    name: str, namespace: str, resource: str, children: list[Node] | None = None, *, optional: bool = False
) -> Node:
    group, kind = GROUP_KINDS[resource]
    node: Node = {
        "objectReference": {"apiGroup": group, "kind": kind, "name": name, "namespace": namespace},
        "labels": {DEPENDENCY_LABEL: _DEPENDENCY.get(resource, "compute")},
    }
    if optional:
        node["optional"] = True
    if children:
        node["children"] = children
    return node


def launcher_pod_name(vmi_name: str, pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The launcher pod of the VMI: owned by it, or (an older pod) annotated with its domain."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        if any(o.get("kind") == "VirtualMachineInstance" and o.get("name") == vmi_name for o in owners):
            return str(meta.get("name"))
        if (meta.get("annotations") or {}).get("kubevirt.io/domain") == vmi_name:
            return str(meta.get("name"))
    return None


def _volume_nodes(volumes: Iterable[Mapping[str, Any]], namespace: str) -> list[Node]:
    nodes = []
    for volume in volumes:
        if (dv := volume.get("dataVolume")) is not None:
            claim = graph_node(dv["name"], namespace, "persistentvolumeclaims")
            nodes.append(graph_node(dv["name"], namespace, "datavolumes", [claim]))
        elif (pvc := volume.get("persistentVolumeClaim")) is not None:
            nodes.append(graph_node(pvc["claimName"], namespace, "persistentvolumeclaims"))
        elif (config_map := volume.get("configMap")) is not None:
            nodes.append(graph_node(config_map["name"], namespace, "configmaps"))
        elif (secret := volume.get("secret")) is not None:
            nodes.append(graph_node(secret["secretName"], namespace, "secrets"))
        elif (account := volume.get("serviceAccount")) is not None:
            nodes.append(graph_node(account["serviceAccountName"], namespace, "serviceaccounts"))
        else:
            cloud_init = volume.get("cloudInitNoCloud") or volume.get("cloudInitConfigDrive") or {}
            for ref in ("userDataSecretRef", "networkDataSecretRef"):
                if (cloud_init.get(ref) or {}).get("name"):
                    nodes.append(graph_node(cloud_init[ref]["name"], namespace, "secrets"))
    return nodes


def _access_credential_nodes(credentials: Iterable[Mapping[str, Any]], namespace: str) -> list[Node]:
    nodes = []
    for credential in credentials:
        for kind in ("sshPublicKey", "userPassword"):
            secret = ((credential.get(kind) or {}).get("source") or {}).get("secret") or {}
            if secret.get("secretName"):
                nodes.append(graph_node(secret["secretName"], namespace, "secrets"))
                break
    return nodes


def _network_nodes(spec: Mapping[str, Any], namespace: str) -> list[Node]:
    nodes = []
    for network in spec.get("networks") or []:
        name = str((network.get("multus") or {}).get("networkName") or "")
        if name:
            nad_namespace, _, nad = name.rpartition("/") if "/" in name else (namespace, "", name)
            nodes.append(graph_node(nad, nad_namespace, "networkattachmentdefinitions", optional=True))
    return nodes


def _matcher_nodes(
    matcher: Mapping[str, Any] | None, status_ref: Mapping[str, Any] | None, namespace: str
) -> list[Node]:
    if matcher is None:
        return []
    nodes = []
    resource = str(matcher.get("kind") or "").lower() + "s"
    if resource in ("virtualmachineclusterinstancetypes", "virtualmachineclusterpreferences"):
        nodes.append(graph_node(str(matcher.get("name")), "", resource, optional=True))
    elif resource in ("virtualmachineinstancetypes", "virtualmachinepreferences"):
        nodes.append(graph_node(str(matcher.get("name")), namespace, resource, optional=True))
    revision = ((status_ref or {}).get("controllerRevisionRef") or {}).get("name")
    if status_ref is None:
        # The VM's status may not be filled in yet: the spec's revision, when it names one.
        revision = matcher.get("revisionName")
    if revision:
        nodes.append(graph_node(str(revision), namespace, "controllerrevisions"))
    return nodes


def vmi_children(
    vmi_spec: Mapping[str, Any], name: str, namespace: str, pods: Iterable[Mapping[str, Any]]
) -> list[Node]:
    children = []
    pod = launcher_pod_name(name, pods)
    if pod:
        children.append(graph_node(pod, namespace, "pods"))
    children += _access_credential_nodes(vmi_spec.get("accessCredentials") or [], namespace)
    children += _volume_nodes(vmi_spec.get("volumes") or [], namespace)
    return children + _network_nodes(vmi_spec, namespace)


def vm_graph(vm: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Node:
    meta, spec, status = vm["metadata"], vm.get("spec") or {}, vm.get("status") or {}
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "")
    template = (spec.get("template") or {}).get("spec") or {}
    children = []
    if status.get("created"):
        pod = launcher_pod_name(name, pods)
        vmi_node = graph_node(name, namespace, "virtualmachineinstances")
        if pod:
            vmi_node["children"] = [graph_node(pod, namespace, "pods")]
        children.append(vmi_node)
    children += _matcher_nodes(spec.get("instancetype"), status.get("instancetypeRef"), namespace)
    children += _matcher_nodes(spec.get("preference"), status.get("preferenceRef"), namespace)
    children += _access_credential_nodes(template.get("accessCredentials") or [], namespace)
    children += _volume_nodes(template.get("volumes") or [], namespace)
    children += _network_nodes(template, namespace)
    return graph_node(name, namespace, "virtualmachines", children)


def vmi_graph(vmi: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Node:
    meta = vmi["metadata"]
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "")
    children = vmi_children(vmi.get("spec") or {}, name, namespace, pods)
    return graph_node(name, namespace, "virtualmachineinstances", children)


def parse_options(body: bytes) -> tuple[bool, LabelSelector | None]:
    """ObjectGraphOptions: whether optional nodes stay (by default they do) and the label selector nodes must match."""
    options = decode_body(body, "ObjectGraphOptions")
    include = options.get("includeOptionalNodes")
    selector = options.get("labelSelector")
    if selector is None:
        return include is not False, None
    try:
        return include is not False, label_selector_from_dict(selector)
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from exc


def filtered(root: Node, include_optional: bool, selector: LabelSelector | None) -> Node:
    """The root with the children (at every depth) the options keep; the root itself always stays."""

    def keep(nodes: list[Node]) -> list[Node]:
        kept = []
        for node in nodes:
            if node.get("optional") and not include_optional:
                continue
            if selector is not None and not selector.matches(node["labels"]):
                continue
            node = {**node, "children": keep(node.get("children") or [])}
            if not node["children"]:
                del node["children"]
            kept.append(node)
        return kept

    result = {**root, "children": keep(root.get("children") or [])}
    if not result["children"]:
        del result["children"]
    return result
