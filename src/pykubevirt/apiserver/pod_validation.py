"""kube-apiserver's Pod strategy: its defaults (`api.pod_defaults`), the checks of ValidatePodCreate a hand-written pod
most often fails, and ValidatePodUpdate's rule that a pod's spec is fixed but for its images, activeDeadlineSeconds,
tolerations and scheduling gates. Binding a pod (`pods/binding`) sets spec.nodeName outside of it, as in kube."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_equal import same_json
from pykubevirt.api.name_validation import dns1123_label_errors
from pykubevirt.api.pod_defaults import set_pod_defaults
from pykubevirt.api.quantity import Quantity, QuantityError, parse_quantity
from pykubevirt.apiserver.object_meta_validation import (
    Cause,
    duplicate,
    forbidden,
    invalid,
    not_found,
    not_supported,
    required,
)
from pykubevirt.apiserver.pod_spec_validation import container_probe_causes, env_causes, volume_source_causes
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext

BINDING = "binding"
UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_MAX_INT32 = 2**31 - 1


class PodAdmission:
    """Defaults and validation of pods on create and update (not on their status writes, which leave the spec alone)."""

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and not resource.group and resource.kind == "Pod"

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        # Copied first: a patched pod may share its parts with the stored one, which must not change here.
        return defaulted(obj)

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        if old is not None and ctx.subresource == BINDING:
            return []
        spec = obj.get("spec") or {}
        old_spec: dict[str, Any] = {}
        if old is not None:
            old_spec = old.get("spec") or {}
            if same_json(spec, old_spec):
                return []  # the common update: metadata only, of a pod stored with its defaults
            # A pod stored before it had kube's defaults is read with them, as kube's decoding reads it from etcd.
            old_spec = defaulted(old).get("spec") or {}
            if same_json(spec, old_spec):
                return []
        causes = spec_causes(spec)
        if old is not None and not causes:
            causes = update_causes(spec, old_spec)
        if causes:
            raise errors.invalid("Pod", "", str((obj.get("metadata") or {}).get("name") or ""), causes)
        return []


def defaulted(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with kube's defaults, its spec a copy."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    pod = {**pod, "spec": copy_json(spec)}
    set_pod_defaults(pod)
    return pod


def _named_items(items: Any) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def spec_causes(spec: dict[str, Any]) -> list[Cause]:
    """The pod spec checks kube makes on every pod write (a subset of ValidatePodSpec)."""
    causes: list[Cause] = []
    volumes: set[str] = set()
    for i, volume in enumerate(_named_items(spec.get("volumes"))):
        name = str(volume.get("name") or "")
        path = f"spec.volumes[{i}].name"
        if not name:
            causes.append(required(path, ""))
        causes += [invalid(path, name, message) for message in dns1123_label_errors(name)] if name else []
        if name in volumes:
            causes.append(duplicate(path, name))
        volumes.add(name)
        causes += volume_source_causes(f"spec.volumes[{i}]", volume)
    regular = _named_items(spec.get("containers"))
    if not regular:
        causes.append(required("spec.containers", ""))
    regular_names = {str(c.get("name") or "") for c in regular}
    init = _named_items(spec.get("initContainers"))
    causes += _container_causes("spec.initContainers", init, volumes, regular_names, init=True)
    causes += _container_causes("spec.containers", regular, volumes, set())
    for key, supported in (("restartPolicy", _RESTART_POLICIES), ("dnsPolicy", _DNS_POLICIES)):
        value = spec.get(key)
        if value and value not in supported:
            causes.append(not_supported(f"spec.{key}", str(value), supported))
    return causes


def _container_causes(
    base: str, containers: list[dict[str, Any]], volumes: set[str], other_names: set[str], *, init: bool = False
) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, container in enumerate(containers):
        at = f"{base}[{i}]"
        name = str(container.get("name") or "")
        if not name:
            causes.append(required(f"{at}.name", ""))
        else:
            causes += [invalid(f"{at}.name", name, message) for message in dns1123_label_errors(name)]
            if name in seen or name in other_names:
                causes.append(duplicate(f"{at}.name", name))
        seen.add(name)
        image = container.get("image")
        if not image:
            causes.append(required(f"{at}.image", ""))
        elif isinstance(image, str) and image.strip() != image:
            causes.append(invalid(f"{at}.image", image, "must not have leading or trailing whitespace"))
        for j, port in enumerate(_named_items(container.get("ports"))):
            number = port.get("containerPort")
            if not isinstance(number, int) or not 1 <= number <= 65535:
                causes.append(
                    invalid(f"{at}.ports[{j}].containerPort", number, "must be between 1 and 65535, inclusive")
                )
            protocol = port.get("protocol")
            if protocol and protocol not in _PROTOCOLS:
                causes.append(not_supported(f"{at}.ports[{j}].protocol", str(protocol), _PROTOCOLS))
        causes += env_causes(f"{at}.env", container.get("env"))
        for j, mount in enumerate(_named_items(container.get("volumeMounts"))):
            mount_name = str(mount.get("name") or "")
            if not mount_name:
                causes.append(required(f"{at}.volumeMounts[{j}].name", ""))
            elif mount_name not in volumes:
                causes.append(not_found(f"{at}.volumeMounts[{j}].name", mount_name))
            if not mount.get("mountPath"):
                causes.append(required(f"{at}.volumeMounts[{j}].mountPath", ""))
        causes += _resource_causes(f"{at}.resources", container.get("resources"))
        causes += container_probe_causes(at, container, init=init)
    return causes


def _resource_causes(at: str, resources: Any) -> list[Cause]:
    """ValidateResourceRequirements: no negative quantity, and no request above its limit (or, for a resource that
    cannot be overcommitted, other than its limit)."""
    resources = resources if isinstance(resources, dict) else {}
    parsed: dict[str, dict[str, Quantity]] = {}
    causes: list[Cause] = []
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        parsed[kind] = {}
        for name, value in (values if isinstance(values, dict) else {}).items():
            try:
                quantity = parse_quantity(value)
            except QuantityError:
                continue  # a malformed quantity is the decoder's 400
            parsed[kind][name] = quantity
            if quantity < Quantity(0):
                causes.append(invalid(f"{at}.{kind}[{name}]", str(quantity), "must be greater than or equal to 0"))
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is None:
            continue
        if request != limit and not _overcommit_allowed(name):
            causes.append(invalid(f"{at}.requests", str(request), f"must be equal to {name} limit of {limit}"))
        elif limit < request:
            causes.append(
                invalid(f"{at}.requests", str(request), f"must be less than or equal to {name} limit of {limit}")
            )
    return causes


def _overcommit_allowed(name: str) -> bool:
    """Native resources (no domain, or kubernetes.io's) but hugepages may be requested below their limit."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def update_causes(spec: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """ValidatePodUpdate's spec rules, in its order: each may stop the rest."""
    for key in ("containers", "initContainers"):
        if len(_named_items(spec.get(key))) != len(_named_items(old.get(key))):
            return [forbidden(f"spec.{key}", "pod updates may not add or remove containers")]
    deadline, old_deadline = spec.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds")
    if deadline is not None:
        if not isinstance(deadline, int) or not 0 <= deadline <= _MAX_INT32:
            return [invalid("spec.activeDeadlineSeconds", deadline, f"must be between 0 and {_MAX_INT32}, inclusive")]
        if isinstance(old_deadline, int) and old_deadline < deadline:
            return [invalid("spec.activeDeadlineSeconds", deadline, "must be less than or equal to previous value")]
    elif old_deadline is not None:
        return [invalid("spec.activeDeadlineSeconds", None, "must not update from a positive integer to nil value")]
    causes = _toleration_causes(spec.get("tolerations"), old.get("tolerations"))
    gates = {str(g.get("name")) for g in _named_items(old.get("schedulingGates"))}
    causes += [
        forbidden("spec.schedulingGates", f"only deletion is allowed, but found new scheduling gate '{g.get('name')}'")
        for g in _named_items(spec.get("schedulingGates"))
        if str(g.get("name")) not in gates
    ]
    changed = _changed_fields(_munged(spec, old), old)
    if changed:
        causes.append(forbidden("spec", UPDATE_FORBIDDEN + "\n" + "\n".join(f"  changed: spec.{f}" for f in changed)))
    return causes


def _toleration_causes(new: Any, old: Any) -> list[Cause]:
    """Only additions: each old toleration must still be there, its tolerationSeconds aside."""
    new_items = _named_items(new)
    for toleration in _named_items(old):
        if not any(_equal_but_seconds(toleration, candidate) for candidate in new_items):
            return [
                forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")
            ]
    return []


def _equal_but_seconds(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return bool(_normal({**old, "tolerationSeconds": None}) == _normal({**new, "tolerationSeconds": None}))


def _munged(spec: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The new spec with what a pod update may change taken from the old one (kube's munging before its compare)."""
    munged = dict(spec)
    for key in ("containers", "initContainers"):
        old_items = _named_items(old.get(key))
        munged[key] = [
            {**item, "image": old_items[i].get("image")} if i < len(old_items) else item
            for i, item in enumerate(_named_items(spec.get(key)))
        ]
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged[key] = old.get(key)
    grace, old_grace = spec.get("terminationGracePeriodSeconds"), old.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    return munged


def _changed_fields(new: dict[str, Any], old: dict[str, Any], prefix: str = "") -> list[str]:
    """The paths at which two specs differ, as Go's semantic equality sees them (nil and empty are equal)."""
    new, old = _normal(new) or {}, _normal(old) or {}
    changed: list[str] = []
    for key in sorted(set(new) | set(old)):
        a, b = new.get(key), old.get(key)
        path = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            changed += _changed_fields(a, b, path + ".")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                if isinstance(x, dict) and isinstance(y, dict):
                    changed += _changed_fields(x, y, f"{path}[{i}].")
                elif x != y:
                    changed.append(f"{path}[{i}]")
        elif a != b:
            changed.append(path)
    return changed


def _normal(value: Any) -> Any:
    """A value with its nulls, empty lists, empty maps and zero values dropped, as a decoded Go struct has them."""
    if isinstance(value, dict):
        kept = {k: n for k, v in value.items() if (n := _normal(v)) is not None}
        return kept or None
    if isinstance(value, list):
        return [_normal(v) for v in value] or None
    if value in (None, "", 0, False) and not isinstance(value, float):
        return None
    return value
