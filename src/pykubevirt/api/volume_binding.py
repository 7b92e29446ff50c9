"""Which PersistentVolume a claim may bind: kube's PV controller matching rules as pure functions.

Upstream: `pkg/controller/volume/persistentvolume/index.go` (findMatchingVolume), `util/util.go`
(CheckVolumeModeMismatches, CheckAccessModes) and the annotation names of `pkg/controller/volume/persistentvolume/util`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict
from pykubevirt.api.quantity import Quantity, QuantityError

SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
FILESYSTEM = "Filesystem"

Obj = Mapping[str, Any]
V = TypeVar("V", bound=Mapping[str, Any])


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def storage_class_of(obj: Obj) -> str:
    """A claim's or volume's class; the beta annotation predates spec.storageClassName and still wins."""
    annotations = _meta(obj).get("annotations") or {}
    if BETA_STORAGE_CLASS in annotations:
        return str(annotations[BETA_STORAGE_CLASS])
    return str(_spec(obj).get("storageClassName") or "")


def to_bytes(value: Any) -> int:
    """A quantity as whole bytes (rounded up); 0 for a missing or malformed one."""
    if value is None:
        return 0
    try:
        return Quantity.parse(value).ceil_int()
    except QuantityError:
        return 0


def requested_bytes(pvc: Obj) -> int:
    return to_bytes(((_spec(pvc).get("resources") or {}).get("requests") or {}).get("storage"))


def capacity_bytes(pv: Obj) -> int:
    return to_bytes((_spec(pv).get("capacity") or {}).get("storage"))


def volume_mode(obj: Obj) -> str:
    return str(_spec(obj).get("volumeMode") or FILESYSTEM)


def claim_key(pvc: Obj) -> str:
    meta = _meta(pvc)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def claim_ref_key(pv: Obj) -> str:
    ref = _spec(pv).get("claimRef") or {}
    return f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else ""


def is_default_class(sc: Obj) -> bool:
    annotations = _meta(sc).get("annotations") or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def default_class(classes: Iterable[Obj]) -> Obj | None:
    """GetDefaultClass: of the classes marked default, the newest; ties go to the first name."""
    defaults = [sc for sc in classes if is_default_class(sc)]
    if not defaults:
        return None
    newest = max(str(_meta(sc).get("creationTimestamp") or "") for sc in defaults)
    return min(
        (sc for sc in defaults if str(_meta(sc).get("creationTimestamp") or "") == newest),
        key=lambda sc: str(_meta(sc).get("name")),
    )


def access_modes_satisfied(wanted: Iterable[str], offered: Iterable[str]) -> bool:
    """CheckAccessModes: the volume offers every mode the claim asks for."""
    return set(wanted) <= set(offered)


def pre_bound_to(pv: Obj, pvc: Obj) -> bool:
    """The volume's claimRef names this claim (and, when it has one, its UID)."""
    ref = _spec(pv).get("claimRef") or {}
    if not ref or claim_ref_key(pv) != claim_key(pvc):
        return False
    return not ref.get("uid") or ref.get("uid") == _meta(pvc).get("uid")


def _selector_matches(pvc: Obj, pv: Obj) -> bool:
    selector = _spec(pvc).get("selector")
    if selector is None:
        return True
    try:
        return label_selector_from_dict(selector).matches(_meta(pv).get("labels") or {})
    except SelectorError:
        return False


def volume_fits(pvc: Obj, pv: Obj) -> bool:
    """Whether `pv` can serve `pvc` by class, mode, access modes, size and selector (binding aside)."""
    if _meta(pv).get("deletionTimestamp"):
        return False
    if storage_class_of(pv) != storage_class_of(pvc) or volume_mode(pv) != volume_mode(pvc):
        return False
    if not access_modes_satisfied(_spec(pvc).get("accessModes") or [], _spec(pv).get("accessModes") or []):
        return False
    return capacity_bytes(pv) >= requested_bytes(pvc) and _selector_matches(pvc, pv)


def find_matching_volume(pvc: Obj, volumes: Iterable[V], node_allows: Callable[[V], bool] | None = None) -> V | None:
    """findMatchingVolume: a volume pre-bound to the claim wins, else the smallest available one that fits.

    `node_allows` (WaitForFirstConsumer, once a node is chosen) keeps only volumes whose node affinity allows it.
    """
    best: V | None = None
    wanted_name = _spec(pvc).get("volumeName")
    for pv in volumes:
        if wanted_name and _meta(pv).get("name") != wanted_name:
            continue
        if not volume_fits(pvc, pv):
            continue
        if node_allows is not None and not node_allows(pv):
            continue
        if pre_bound_to(pv, pvc):
            return pv
        if _spec(pv).get("claimRef"):
            continue
        if best is None or capacity_bytes(pv) < capacity_bytes(best):
            best = pv
    return best


def node_affinity_terms(pv: Obj) -> list[Mapping[str, Any]]:
    """The nodeSelectorTerms of a volume's required node affinity (empty: any node)."""
    required = (_spec(pv).get("nodeAffinity") or {}).get("required") or {}
    return list(required.get("nodeSelectorTerms") or [])


def hostname_affinity(node: str) -> dict[str, Any]:
    """The node affinity of a volume that lives on one node (local-path-provisioner's)."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}
