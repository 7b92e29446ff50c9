"""kube-apiserver's defaults and validation of PersistentVolumes, PersistentVolumeClaims and StorageClasses.

Messages are apimachinery's (`pkg/apis/core/validation/validation.go`, `pkg/apis/storage/validation/validation.go`,
defaults from `pkg/apis/core/v1/defaults.go` and `pkg/apis/storage/v1/defaults.go`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api import causes
from pykubevirt.api.causes import Cause
from pykubevirt.api.name_validation import dns1123_subdomain_errors, qualified_name_errors
from pykubevirt.api.quantity import Quantity, QuantityError

ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
VOLUME_MODES = ("Block", "Filesystem")
PV_RECLAIM_POLICIES = ("Delete", "Recycle", "Retain")
CLASS_RECLAIM_POLICIES = ("Delete", "Retain")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
# The PV spec fields that are not its volume source (everything else in the spec is one).
_PV_NON_SOURCE_FIELDS = frozenset(
    {
        "accessModes",
        "capacity",
        "claimRef",
        "mountOptions",
        "nodeAffinity",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "volumeAttributesClassName",
        "volumeMode",
    }
)
PVC_IMMUTABLE_MESSAGE = (
    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
)


def _quote(value: Any) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(_quote(s) for s in supported)
    return causes.not_supported(path, f"Unsupported value: {_quote(value)}: supported values: {listed}")


def _required(path: str, detail: str = "") -> Cause:
    return causes.required(path, f"Required value: {detail}" if detail else "Required value")


def _forbidden(path: str, detail: str) -> Cause:
    return causes.forbidden(path, f"Forbidden: {detail}")


def _invalid(path: str, value: Any, detail: str) -> Cause:
    return causes.invalid(path, f"Invalid value: {_quote(value)}: {detail}")


def _immutable(path: str, value: Any) -> Cause:
    return _invalid(path, value, "field is immutable")


def storage_request(spec: Mapping[str, Any]) -> Any:
    return ((spec.get("resources") or {}).get("requests") or {}).get("storage")


def quantity_or_none(value: Any) -> Quantity | None:
    if value is None:
        return None
    try:
        return Quantity.parse(value)
    except QuantityError:
        return None


# ------------------------------------------------------------------------------------------------ defaults


def default_pv(pv: dict[str, Any]) -> None:
    """SetDefaults_PersistentVolume: reclaim Retain, volumeMode Filesystem, a new volume is Pending."""
    spec = pv.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    status = pv.setdefault("status", {})
    status.setdefault("phase", "Pending")


def default_pvc(pvc: dict[str, Any]) -> None:
    """SetDefaults_PersistentVolumeClaim(Spec): volumeMode Filesystem, a new claim is Pending."""
    spec = pvc.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    status = pvc.setdefault("status", {})
    status.setdefault("phase", "Pending")


def normalize_data_sources(pvc: dict[str, Any]) -> None:
    """NormalizeDataSources (PVC PrepareForCreate): dataSource and dataSourceRef each fill the other when unset."""
    spec = pvc.setdefault("spec", {})
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if source is not None and ref is None:
        spec["dataSourceRef"] = dict(source)
    elif ref is not None and source is None and not ref.get("namespace"):
        spec["dataSource"] = {k: v for k, v in ref.items() if k != "namespace"}


def default_storage_class(sc: dict[str, Any]) -> None:
    """SetDefaults_StorageClass: reclaim Delete and binding Immediate when unset."""
    sc.setdefault("reclaimPolicy", "Delete")
    sc.setdefault("volumeBindingMode", "Immediate")


# ------------------------------------------------------------------------------------------------ validation


def _access_mode_causes(path: str, modes: Any) -> list[Cause]:
    if not modes:
        return [_required(path, "at least 1 access mode is required")]
    found: list[Cause] = []
    for mode in modes:
        if mode not in ACCESS_MODES:
            found.append(_unsupported(path, mode, ACCESS_MODES))
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        found.append(_forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return found


def _class_name_causes(path: str, name: Any) -> list[Cause]:
    if not name:
        return []
    return [_invalid(path, name, message) for message in dns1123_subdomain_errors(str(name))]


def _positive_quantity(path: str, value: Any) -> list[Cause]:
    quantity = quantity_or_none(value)
    if quantity is None:
        return [_invalid(path, value, "must be a valid quantity")]
    if quantity.value <= 0:
        return [_invalid(path, str(quantity), "must be greater than zero")]
    return []


def _volume_mode_causes(path: str, mode: Any) -> list[Cause]:
    if mode is not None and mode not in VOLUME_MODES:
        return [_unsupported(path, mode, VOLUME_MODES)]
    return []


def _data_source_causes(path: str, source: Mapping[str, Any]) -> list[Cause]:
    found = []
    if not source.get("name"):
        found.append(_required(f"{path}.name"))
    if not source.get("kind"):
        found.append(_required(f"{path}.kind"))
    if not source.get("apiGroup") and source.get("kind") != "PersistentVolumeClaim":
        message = "must be 'PersistentVolumeClaim' when referencing the default apiGroup"
        found.append(_invalid(path, source.get("kind", ""), message))
    return found


def _data_sources_match(source: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    keys = ("apiGroup", "kind", "name")
    return not ref.get("namespace") and all((source.get(k) or "") == (ref.get(k) or "") for k in keys)


def validate_pvc(pvc: Mapping[str, Any]) -> list[Cause]:
    """ValidatePersistentVolumeClaim (its spec)."""
    spec = pvc.get("spec") or {}
    found = _access_mode_causes("spec.accessModes", spec.get("accessModes"))
    request = storage_request(spec)
    if request is None:
        found.append(_required("spec.resources[storage]"))
    else:
        found += _positive_quantity("spec.resources[storage]", request)
    found += _class_name_causes("spec.storageClassName", spec.get("storageClassName"))
    found += _volume_mode_causes("spec.volumeMode", spec.get("volumeMode"))
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if isinstance(source, Mapping):
        found += _data_source_causes("spec.dataSource", source)
    if isinstance(ref, Mapping):
        found += _data_source_causes("spec.dataSourceRef", ref)
    if isinstance(source, Mapping) and isinstance(ref, Mapping) and not _data_sources_match(source, ref):
        found.append(causes.invalid("spec.dataSource", "Invalid value: must match dataSourceRef"))
    return found


def validate_pvc_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePersistentVolumeClaimUpdate: only a bound claim's storage request (and attributes class) may change."""
    found = validate_pvc(new)
    new_spec, old_spec = dict(new.get("spec") or {}), dict(old.get("spec") or {})
    bound = (old.get("status") or {}).get("phase") == "Bound"
    # A claim the controller binds gets spec.volumeName once; that is how binding is recorded, not a user change.
    if not old_spec.get("volumeName") and new_spec.get("volumeName"):
        old_spec["volumeName"] = new_spec["volumeName"]
    if bound:
        old_spec = _with_request(old_spec, storage_request(new_spec))
        old_spec["volumeAttributesClassName"] = new_spec.get("volumeAttributesClassName")
        new_spec["volumeAttributesClassName"] = new_spec.get("volumeAttributesClassName")
    if new_spec != old_spec:
        found.append(_forbidden("spec", PVC_IMMUTABLE_MESSAGE))
        return found
    if bound:
        # Shrinking is only a recovery from a failed expansion: never below what the volume already has.
        wanted = quantity_or_none(storage_request(new.get("spec") or {}))
        previous = quantity_or_none(storage_request(old.get("spec") or {}))
        capacity = quantity_or_none(((old.get("status") or {}).get("capacity") or {}).get("storage"))
        shrinking = wanted is not None and previous is not None and wanted < previous
        if shrinking and capacity is not None and wanted is not None and not capacity < wanted:
            found.append(_forbidden("spec.resources.requests.storage", "field can not be less than status.capacity"))
    return found


def _with_request(spec: dict[str, Any], request: Any) -> dict[str, Any]:
    resources = dict(spec.get("resources") or {})
    requests = dict(resources.get("requests") or {})
    if request is None:
        requests.pop("storage", None)
    else:
        requests["storage"] = request
    resources["requests"] = requests
    return dict(spec, resources=resources)


def pv_sources(spec: Mapping[str, Any]) -> list[str]:
    """The volume source fields a PV spec sets (exactly one is valid)."""
    return sorted(key for key, value in spec.items() if key not in _PV_NON_SOURCE_FIELDS and value is not None)


def _capacity_causes(capacity: Any) -> list[Cause]:
    if not capacity:
        return [_required("spec.capacity")]
    found: list[Cause] = []
    for key in capacity:
        if key != "storage":
            found.append(_unsupported("spec.capacity", key, ("storage",)))
    if "storage" in capacity:
        found += _positive_quantity("spec.capacity[storage]", capacity["storage"])
    else:
        found.append(_required("spec.capacity"))
    return found


def validate_pv(pv: Mapping[str, Any]) -> list[Cause]:
    """ValidatePersistentVolumeSpec: modes, capacity, reclaim policy and exactly one volume source."""
    spec = pv.get("spec") or {}
    found = _access_mode_causes("spec.accessModes", spec.get("accessModes"))
    found += _capacity_causes(spec.get("capacity"))
    policy = spec.get("persistentVolumeReclaimPolicy")
    if policy is not None and policy not in PV_RECLAIM_POLICIES:
        found.append(_unsupported("spec.persistentVolumeReclaimPolicy", policy, PV_RECLAIM_POLICIES))
    found += _class_name_causes("spec.storageClassName", spec.get("storageClassName"))
    found += _volume_mode_causes("spec.volumeMode", spec.get("volumeMode"))
    sources = pv_sources(spec)
    if not sources:
        found.append(_required("spec", "must specify a volume type"))
    for extra in sources[1:]:
        found.append(_forbidden(f"spec.{extra}", "may not specify more than 1 volume type"))
    for kind in ("hostPath", "local"):
        source = spec.get(kind)
        if isinstance(source, Mapping) and not source.get("path"):
            found.append(_required(f"spec.{kind}.path"))
    if spec.get("local") is not None and not (spec.get("nodeAffinity") or {}).get("required"):
        found.append(_required("spec.nodeAffinity", "Local volume requires node affinity"))
    return found


def validate_pv_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePersistentVolumeUpdate: the volume source, volumeMode and a set node affinity are immutable."""
    found = validate_pv(new)
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    new_sources = {k: new_spec.get(k) for k in pv_sources(new_spec)}
    old_sources = {k: old_spec.get(k) for k in pv_sources(old_spec)}
    if new_sources != old_sources:
        found.append(
            _forbidden("spec.persistentvolumesource", "spec.persistentvolumesource is immutable after creation")
        )
    if new_spec.get("volumeMode") != old_spec.get("volumeMode"):
        found.append(_immutable("volumeMode", new_spec.get("volumeMode")))
    if old_spec.get("nodeAffinity") is not None and new_spec.get("nodeAffinity") != old_spec.get("nodeAffinity"):
        found.append(_immutable("nodeAffinity", new_spec.get("nodeAffinity")))
    return found


def validate_storage_class(sc: Mapping[str, Any]) -> list[Cause]:
    """ValidateStorageClass: provisioner, reclaim policy and binding mode."""
    found: list[Cause] = []
    provisioner = sc.get("provisioner")
    if not provisioner:
        found.append(_required("provisioner"))
    else:
        found += [_invalid("provisioner", provisioner, m) for m in qualified_name_errors(str(provisioner))]
    policy = sc.get("reclaimPolicy")
    if policy is not None and policy not in CLASS_RECLAIM_POLICIES:
        found.append(_unsupported("reclaimPolicy", policy, CLASS_RECLAIM_POLICIES))
    mode = sc.get("volumeBindingMode")
    if mode is None:
        found.append(_required("volumeBindingMode"))
    elif mode not in BINDING_MODES:
        found.append(_unsupported("volumeBindingMode", mode, BINDING_MODES))
    return found


def validate_storage_class_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateStorageClassUpdate: parameters, provisioner, reclaim policy and binding mode never change."""
    found = validate_storage_class(new)
    for key in ("parameters", "provisioner", "reclaimPolicy"):
        if new.get(key) != old.get(key):
            found.append(_forbidden(key, f"updates to {key} are forbidden."))
    if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
        found.append(_immutable("volumeBindingMode", new.get("volumeBindingMode")))
    return found
