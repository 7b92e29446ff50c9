"""external-snapshotter's API (`snapshot.storage.k8s.io/v1`): VolumeSnapshot, VolumeSnapshotContent and
VolumeSnapshotClass, their CRD schemas, the CEL rules of those CRDs as Python checks, and the names the
snapshot-controller uses (finalizers, annotations, content names).

Upstream: `client/config/crd/snapshot.storage.k8s.io_*.yaml`, `pkg/utils/util.go`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api import causes, constants, errors
from pykubevirt.api.kinds import AGE_COLUMN_PATH, KindSpec, PrinterColumn
from pykubevirt.api.quantity import Quantity, QuantityFormat
from pykubevirt.api.schema import Schema, boolean, int64, obj, quantity, string, string_map, timestamp

GROUP = constants.VOLUME_SNAPSHOT_GROUP
VERSION = constants.VOLUME_SNAPSHOT_VERSION
API_VERSION = f"{GROUP}/{VERSION}"

# pkg/utils/util.go
CONTENT_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
BOUND_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
AS_SOURCE_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
PVC_FINALIZER = "snapshot.storage.kubernetes.io/pvc-as-source-protection"
DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
BEING_DELETED_ANNOTATION = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
BEING_CREATED_ANNOTATION = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
CONTENT_NAME_PREFIX = "snapcontent-"
DELETION_POLICIES = ("Delete", "Retain")

_API_VERSION_DOC = "APIVersion defines the versioned schema of this representation of an object."
_KIND_DOC = "Kind is a string value representing the REST resource this object represents."


def _error(owner: str) -> Schema:
    return obj(
        {
            "message": string("message is a string detailing the encountered error during snapshot creation."),
            "time": timestamp("time is the timestamp when the error was encountered."),
        },
        f"error is the last observed error during {owner}, if any.",
    )


def _cel(schema: Schema, *rules: tuple[str, str]) -> Schema:
    """The node with its CRD's x-kubernetes-validations (served as written; `validation_causes` enforces them)."""
    return {**schema, "x-kubernetes-validations": [{"message": m, "rule": r} for r, m in rules]}


def _immutable(field: str, description: str) -> Schema:
    return _cel(string(description), ("self == oldSelf", f"{field} is immutable"))


def _once_set(field: str) -> tuple[str, str]:
    return (f"!has(oldSelf.{field}) || has(self.{field})", f"{field} is required once set")


def _exactly_one(a: str, b: str) -> tuple[str, str]:
    rule = f"(has(self.{a}) && !has(self.{b})) || (!has(self.{a}) && has(self.{b}))"
    return (rule, f"exactly one of {a} and {b} must be set")


_SNAPSHOT_SOURCE = _cel(
    obj(
        {
            "persistentVolumeClaimName": _immutable(
                "persistentVolumeClaimName",
                "persistentVolumeClaimName specifies the name of the PersistentVolumeClaim object representing the "
                "volume from which a snapshot should be created. This field is immutable.",
            ),
            "volumeSnapshotContentName": _immutable(
                "volumeSnapshotContentName",
                "volumeSnapshotContentName specifies the name of a pre-existing VolumeSnapshotContent object "
                "representing an existing volume snapshot. This field is immutable.",
            ),
        },
        "source specifies where a snapshot will be created from. This field is immutable after creation. Required.",
    ),
    _once_set("persistentVolumeClaimName"),
    _once_set("volumeSnapshotContentName"),
    _exactly_one("volumeSnapshotContentName", "persistentVolumeClaimName"),
)

VOLUME_SNAPSHOT_SCHEMA = obj(
    {
        "apiVersion": string(_API_VERSION_DOC),
        "kind": string(_KIND_DOC),
        "metadata": {"type": "object"},
        "spec": obj(
            {
                "source": _SNAPSHOT_SOURCE,
                "volumeSnapshotClassName": _cel(
                    string(
                        "VolumeSnapshotClassName is the name of the VolumeSnapshotClass requested by the "
                        "VolumeSnapshot. Empty string is not allowed for this field."
                    ),
                    ("size(self) > 0", "volumeSnapshotClassName must not be the empty string when set"),
                ),
            },
            "spec defines the desired characteristics of a snapshot requested by a user. Required.",
            required=["source"],
        ),
        "status": obj(
            {
                "boundVolumeSnapshotContentName": string(
                    "boundVolumeSnapshotContentName is the name of the VolumeSnapshotContent object to which this "
                    "VolumeSnapshot object intends to bind to."
                ),
                "creationTime": timestamp(
                    "creationTime is the timestamp when the point-in-time snapshot is taken by the underlying "
                    "storage system."
                ),
                "error": _error("snapshot creation"),
                "readyToUse": boolean("readyToUse indicates if the snapshot is ready to be used to restore a volume."),
                "restoreSize": quantity(
                    "restoreSize represents the minimum size of volume required to create a volume from this snapshot."
                ),
                "volumeGroupSnapshotName": string(
                    "VolumeGroupSnapshotName is the name of the VolumeGroupSnapshot of which this VolumeSnapshot is a "
                    "part of."
                ),
            },
            "status represents the current information of a snapshot.",
        ),
    },
    "VolumeSnapshot is a user's request for either creating a point-in-time snapshot of a persistent volume, or "
    "binding to a pre-existing snapshot.",
    required=["spec"],
)

_CONTENT_SOURCE = _cel(
    obj(
        {
            "snapshotHandle": _immutable(
                "snapshotHandle",
                'snapshotHandle specifies the CSI "snapshot_id" of a pre-existing snapshot on the underlying '
                "storage system for which a Kubernetes object representation was (or should be) created. "
                "This field is immutable.",
            ),
            "volumeHandle": _immutable(
                "volumeHandle",
                'volumeHandle specifies the CSI "volume_id" of the volume from which a snapshot should be '
                "dynamically taken from. This field is immutable.",
            ),
        },
        "source specifies whether the snapshot is (or should be) dynamically provisioned or already exists, and "
        "just requires a Kubernetes object representation. This field is immutable after creation. Required.",
    ),
    _once_set("volumeHandle"),
    _once_set("snapshotHandle"),
    _exactly_one("volumeHandle", "snapshotHandle"),
)

_OBJECT_REFERENCE = {
    **obj(
        {
            "apiVersion": string("API version of the referent."),
            "fieldPath": string("If referring to a piece of an object instead of an entire object, the path."),
            "kind": string("Kind of the referent."),
            "name": string("Name of the referent."),
            "namespace": string("Namespace of the referent."),
            "resourceVersion": string("Specific resourceVersion to which this reference is made, if any."),
            "uid": string("UID of the referent."),
        },
        "volumeSnapshotRef specifies the VolumeSnapshot object to which this VolumeSnapshotContent object is bound. "
        "Required.",
    ),
    "x-kubernetes-map-type": "atomic",
    "x-kubernetes-validations": [
        {
            "message": "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set",
            "rule": "has(self.name) && has(self.__namespace__)",
        }
    ],
}

VOLUME_SNAPSHOT_CONTENT_SCHEMA = obj(
    {
        "apiVersion": string(_API_VERSION_DOC),
        "kind": string(_KIND_DOC),
        "metadata": {"type": "object"},
        "spec": _cel(
            obj(
                {
                    "deletionPolicy": string(
                        "deletionPolicy determines whether this VolumeSnapshotContent and its physical snapshot on "
                        "the underlying storage system should be deleted when its bound VolumeSnapshot is deleted. "
                        "Required.",
                        enum=DELETION_POLICIES,
                    ),
                    "driver": string(
                        "driver is the name of the CSI driver used to create the physical snapshot on the underlying "
                        "storage system. Required."
                    ),
                    "source": _CONTENT_SOURCE,
                    "sourceVolumeMode": _immutable(
                        "sourceVolumeMode", "SourceVolumeMode is the mode of the volume whose snapshot is taken."
                    ),
                    "volumeSnapshotClassName": string(
                        "name of the VolumeSnapshotClass from which this snapshot was (or will be) created."
                    ),
                    "volumeSnapshotRef": _OBJECT_REFERENCE,
                },
                "spec defines properties of a VolumeSnapshotContent created by the underlying storage system. "
                "Required.",
                required=["deletionPolicy", "driver", "source", "volumeSnapshotRef"],
            ),
            _once_set("sourceVolumeMode"),
        ),
        "status": obj(
            {
                "creationTime": int64(
                    "creationTime is the timestamp when the point-in-time snapshot is taken by the underlying storage "
                    "system, in nanoseconds since the epoch."
                ),
                "error": _error("snapshot creation"),
                "readyToUse": boolean("readyToUse indicates if a snapshot is ready to be used to restore a volume."),
                "restoreSize": int64("restoreSize represents the complete size of the snapshot in bytes.", minimum=0),
                "snapshotHandle": string(
                    'snapshotHandle is the CSI "snapshot_id" of a snapshot on the underlying storage system.'
                ),
                "volumeGroupSnapshotHandle": string(
                    'VolumeGroupSnapshotHandle is the CSI "group_snapshot_id" of a group snapshot.'
                ),
            },
            "status represents the current information of a snapshot.",
        ),
    },
    'VolumeSnapshotContent represents the actual "on-disk" snapshot object in the underlying storage system',
    required=["spec"],
)

VOLUME_SNAPSHOT_CLASS_SCHEMA = obj(
    {
        "apiVersion": string(_API_VERSION_DOC),
        "deletionPolicy": string(
            "deletionPolicy determines whether a VolumeSnapshotContent created through the VolumeSnapshotClass should "
            "be deleted when its bound VolumeSnapshot is deleted. Required.",
            enum=DELETION_POLICIES,
        ),
        "driver": string("driver is the name of the storage driver that handles this VolumeSnapshotClass. Required."),
        "kind": string(_KIND_DOC),
        "metadata": {"type": "object"},
        "parameters": string_map(
            "parameters is a key-value map with storage driver specific parameters for creating snapshots."
        ),
    },
    "VolumeSnapshotClass specifies parameters that a underlying storage system uses when creating a volume snapshot.",
    required=["deletionPolicy", "driver"],
)


def _column(name: str, kind: str, path: str, description: str = "") -> PrinterColumn:
    return PrinterColumn(name, kind, path, description=description)


_AGE = PrinterColumn("Age", "date", AGE_COLUMN_PATH)
_READY = _column(
    "ReadyToUse", "boolean", ".status.readyToUse", "Indicates if the snapshot is ready to be used to restore a volume."
)

VOLUME_SNAPSHOT = KindSpec(
    group=GROUP,
    version=VERSION,
    kind=constants.VOLUME_SNAPSHOT_KIND,
    plural="volumesnapshots",
    singular="volumesnapshot",
    schema=VOLUME_SNAPSHOT_SCHEMA,
    short_names=("vs",),
    printer_columns=(
        _READY,
        _column(
            "SourcePVC",
            "string",
            ".spec.source.persistentVolumeClaimName",
            "If a new snapshot needs to be created, this contains the name of the source PVC from which this "
            "snapshot was (or will be) created.",
        ),
        _column(
            "SourceSnapshotContent",
            "string",
            ".spec.source.volumeSnapshotContentName",
            "If a snapshot already exists, this contains the name of the existing VolumeSnapshotContent object "
            "representing the existing snapshot.",
        ),
        _column(
            "RestoreSize",
            "string",
            ".status.restoreSize",
            "Represents the minimum size of volume required to rehydrate from this snapshot.",
        ),
        _column(
            "SnapshotClass",
            "string",
            ".spec.volumeSnapshotClassName",
            "The name of the VolumeSnapshotClass requested by the VolumeSnapshot.",
        ),
        _column(
            "SnapshotContent",
            "string",
            ".status.boundVolumeSnapshotContentName",
            "Name of the VolumeSnapshotContent object to which the VolumeSnapshot object intends to bind to.",
        ),
        _column(
            "CreationTime",
            "date",
            ".status.creationTime",
            "Timestamp when the point-in-time snapshot was taken by the underlying storage system.",
        ),
        _AGE,
    ),
)

VOLUME_SNAPSHOT_CONTENT = KindSpec(
    group=GROUP,
    version=VERSION,
    kind=constants.VOLUME_SNAPSHOT_CONTENT_KIND,
    plural="volumesnapshotcontents",
    singular="volumesnapshotcontent",
    schema=VOLUME_SNAPSHOT_CONTENT_SCHEMA,
    namespaced=False,
    short_names=("vsc", "vscs"),
    printer_columns=(
        _READY,
        _column(
            "RestoreSize", "integer", ".status.restoreSize", "Represents the complete size of the snapshot in bytes"
        ),
        _column(
            "DeletionPolicy",
            "string",
            ".spec.deletionPolicy",
            "Determines whether this VolumeSnapshotContent and its physical snapshot on the underlying storage system "
            "should be deleted when its bound VolumeSnapshot is deleted.",
        ),
        _column(
            "Driver",
            "string",
            ".spec.driver",
            "Name of the CSI driver used to create the physical snapshot on the underlying storage system.",
        ),
        _column(
            "VolumeSnapshotClass",
            "string",
            ".spec.volumeSnapshotClassName",
            "Name of the VolumeSnapshotClass to which this snapshot belongs.",
        ),
        _column(
            "VolumeSnapshot",
            "string",
            ".spec.volumeSnapshotRef.name",
            "Name of the VolumeSnapshot object to which this VolumeSnapshotContent object is bound.",
        ),
        _column(
            "VolumeSnapshotNamespace",
            "string",
            ".spec.volumeSnapshotRef.namespace",
            "Namespace of the VolumeSnapshot object to which this VolumeSnapshotContent object is bound.",
        ),
        _AGE,
    ),
)

VOLUME_SNAPSHOT_CLASS = KindSpec(
    group=GROUP,
    version=VERSION,
    kind=constants.VOLUME_SNAPSHOT_CLASS_KIND,
    plural="volumesnapshotclasses",
    singular="volumesnapshotclass",
    schema=VOLUME_SNAPSHOT_CLASS_SCHEMA,
    namespaced=False,
    short_names=("vsclass", "vsclasses"),
    status_subresource=False,
    printer_columns=(
        _column("Driver", "string", ".driver"),
        _column(
            "DeletionPolicy",
            "string",
            ".deletionPolicy",
            "Determines whether a VolumeSnapshotContent created through the VolumeSnapshotClass should be deleted "
            "when its bound VolumeSnapshot is deleted.",
        ),
        _AGE,
    ),
)

SNAPSHOT_KINDS = (VOLUME_SNAPSHOT_CLASS, VOLUME_SNAPSHOT, VOLUME_SNAPSHOT_CONTENT)


# ---------------------------------------------------------------------------------------------------------------------
# The CRDs' CEL rules. The embedded API server evaluates no CEL, so each rule is written out here with its message, in
# kube-apiserver's form for a failed rule: `<field>: Invalid value: "<type>": <message>`.


def _rule_failed(field: str, json_type: str, message: str) -> causes.Cause:
    return causes.invalid(field, f'Invalid value: "{json_type}": {message}')


def _exactly_one_causes(path: str, node: Mapping[str, Any], a: str, b: str) -> list[causes.Cause]:
    if (a in node) == (b in node):
        return [_rule_failed(path, "object", f"exactly one of {a} and {b} must be set")]
    return []


def _transition_causes(path: str, new: Mapping[str, Any], old: Mapping[str, Any], fields: tuple[str, ...]) -> list[Any]:
    found = []
    for field in fields:
        if field in old and field not in new:
            found.append(_rule_failed(path, "object", f"{field} is required once set"))
    for field in fields:
        if field in old and field in new and new[field] != old[field]:
            found.append(_rule_failed(f"{path}.{field}", "string", f"{field} is immutable"))
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def snapshot_causes(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[causes.Cause]:
    """The VolumeSnapshot CRD's CEL rules (`old` for an update: the transition rules too)."""
    spec = _mapping(new.get("spec"))
    found: list[causes.Cause] = []
    if "source" in spec:
        source = _mapping(spec.get("source"))
        names = ("persistentVolumeClaimName", "volumeSnapshotContentName")
        if old is not None and "source" in _mapping(old.get("spec")):
            found += _transition_causes("spec.source", source, _mapping(_mapping(old.get("spec")).get("source")), names)
        found += _exactly_one_causes("spec.source", source, "volumeSnapshotContentName", "persistentVolumeClaimName")
    if spec.get("volumeSnapshotClassName") == "":
        message = "volumeSnapshotClassName must not be the empty string when set"
        found.append(_rule_failed("spec.volumeSnapshotClassName", "string", message))
    return found


def content_causes(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[causes.Cause]:
    """The VolumeSnapshotContent CRD's CEL rules (`old` for an update: the transition rules too)."""
    spec = _mapping(new.get("spec"))
    old_spec = _mapping(old.get("spec")) if old is not None else None
    found: list[causes.Cause] = []
    if old_spec is not None:
        found += _transition_causes("spec", spec, old_spec, ("sourceVolumeMode",))
    if "source" in spec:
        source = _mapping(spec.get("source"))
        if old_spec is not None and "source" in old_spec:
            handles = ("volumeHandle", "snapshotHandle")
            found += _transition_causes("spec.source", source, _mapping(old_spec.get("source")), handles)
        found += _exactly_one_causes("spec.source", source, "volumeHandle", "snapshotHandle")
    if "volumeSnapshotRef" in spec:
        ref = _mapping(spec.get("volumeSnapshotRef"))
        if "name" not in ref or "namespace" not in ref:
            message = "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set"
            found.append(_rule_failed("spec.volumeSnapshotRef", "object", message))
    return found


class SnapshotValidation:
    """The snapshot CRDs' CEL rules as an admission plugin of the embedded API server (duck-typed: `api` is pure)."""

    def handles(self, resource: Any) -> bool:
        return getattr(resource, "group", "") == GROUP and not getattr(resource, "builtin", False)

    def mutate(
        self, resource: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: Any
    ) -> dict[str, Any]:
        return obj

    def validate(
        self, resource: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: Any
    ) -> list[str]:
        # Validation ratcheting: a status write (or any write) that leaves the spec as it was is not checked again.
        subresource: str = getattr(ctx, "subresource", "")
        if operation not in ("CREATE", "UPDATE") or subresource:
            return []
        if old is not None and old.get("spec") == obj.get("spec"):
            return []
        kind = getattr(resource, "kind", "")
        if kind == constants.VOLUME_SNAPSHOT_KIND:
            found = snapshot_causes(obj, old)
        elif kind == constants.VOLUME_SNAPSHOT_CONTENT_KIND:
            found = content_causes(obj, old)
        else:
            return []
        if found:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.invalid(kind, GROUP, name, [cause.to_dict() for cause in found])
        return []


# ---------------------------------------------------------------------------------------------------------------------
# Reading the objects


def content_name_for(snapshot: Mapping[str, Any]) -> str:
    """GetDynamicSnapshotContentNameForSnapshot: `snapcontent-<snapshot uid>`."""
    return CONTENT_NAME_PREFIX + str(_mapping(snapshot.get("metadata")).get("uid", ""))


def is_default_class(snapshot_class: Mapping[str, Any]) -> bool:
    annotations = _mapping(_mapping(snapshot_class.get("metadata")).get("annotations"))
    return annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"


def restore_size_quantity(size: int) -> str:
    """The snapshot's restoreSize as the snapshot-controller writes it: resource.NewQuantity(size, BinarySI)."""
    return str(Quantity(size, QuantityFormat.BINARY_SI))


def snapshot_data_source(pvc: Mapping[str, Any]) -> str:
    """The name of the VolumeSnapshot a claim is to be restored from ("" when its data source is something else)."""
    spec = _mapping(pvc.get("spec"))
    for field in ("dataSourceRef", "dataSource"):
        source = _mapping(spec.get(field))
        if source.get("kind") == constants.VOLUME_SNAPSHOT_KIND and source.get("apiGroup") == GROUP:
            return str(source.get("name") or "")
    return ""


def go_quote(text: str) -> str:
    """Go's %q of a string (strconv.Quote) for the printable text error messages carry."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'
