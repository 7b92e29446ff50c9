"""`virtctl image-upload`'s flags, their checks (parseArgs, validateDefaultInstancetypeArgs) and the manifests it
creates (createUploadPVC, createUploadDataVolume, createNewDataSource), without any cluster access."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.virtctl.client import VirtctlError

UPLOAD_TARGET = "cdi.kubevirt.io/storage.upload.target"
FORCE_BIND = "cdi.kubevirt.io/storage.bind.immediate.requested"
CONTENT_TYPE = "cdi.kubevirt.io/storage.contentType"
APPLY_STORAGE_PROFILE = "cdi.kubevirt.io/applyStorageProfile"
DEFAULT_LABELS = (
    ("default_instancetype", "instancetype.kubevirt.io/default-instancetype"),
    ("default_instancetype_kind", "instancetype.kubevirt.io/default-instancetype-kind"),
    ("default_preference", "instancetype.kubevirt.io/default-preference"),
    ("default_preference_kind", "instancetype.kubevirt.io/default-preference-kind"),
)
READ_ONLY = "cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany if supported"
DEPRECATED = {
    "--pvc-name": "specify the name as the second argument instead.",
    "--pvc-size": "use --size instead.",
    "--block-volume": "specify volume mode (filesystem/block) with --volume-mode instead.",
}
# strconv.ParseUint with base 0: decimal, 0x/0o/0b prefixes, a bare leading 0 for octal, underscores between digits.
_UINT = re.compile(
    r"0[xX]_?[0-9a-fA-F]+(_[0-9a-fA-F]+)*|0[oO]_?[0-7]+(_[0-7]+)*|0[bB]_?[01]+(_[01]+)*|[0-9]+(_[0-9]+)*"
)
_MAX_UINT = (1 << 64) - 1


class _Deprecated(argparse.Action):
    """Stores the value and notes each use, as pflag prints one line per deprecated flag set."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        setattr(namespace, self.dest, True if self.nargs == 0 else values)
        used = list(getattr(namespace, "deprecated_used", None) or [])
        namespace.deprecated_used = [*used, self.option_strings[0]]


def add_arguments(command: Any) -> None:
    upload = command("image-upload", "Upload a VM image to a DataVolume/PersistentVolumeClaim.")
    # One list, counted by the command (cobra's MaximumNArgs(2)), wherever the words stand among the flags.
    upload.add_argument("positionals", nargs="*", metavar="dv|pvc NAME")
    upload.set_defaults(deprecated_used=[])
    add = upload.add_argument
    add("--insecure", action="store_true", help="Allow insecure server connections when using HTTPS.")
    add("--uploadproxy-url", default="", help="The URL of the cdi-upload proxy service.")
    add("--pvc-name", default="", action=_Deprecated, help=argparse.SUPPRESS)
    add("--pvc-size", default="", action=_Deprecated, help=argparse.SUPPRESS)
    add("--size", default="", help="The size of the DataVolume to create (ex. 10Gi, 500Mi).")
    add("--storage-class", default="", help="The storage class for the PVC.")
    add("--access-mode", default="", help="The access mode for the PVC.")
    add("--block-volume", default=False, nargs=0, action=_Deprecated, help=argparse.SUPPRESS)
    add(
        "--volume-mode",
        default="",
        help="Specify the VolumeMode (block/filesystem) used to create the PVC. Default is the storageProfile "
        "default. For archive upload default is filesystem.",
    )
    add("--image-path", default="", help="Path to the local VM image.")
    add("--archive-path", default="", help="Path to the local archive.")
    add("--no-create", action="store_true", help="Don't attempt to create a new DataVolume/PVC.")
    # Unsigned as pflag's UintVar: checked (with its error text) by parse_options, not by argparse.
    add("--wait-secs", default="300", help="Seconds to wait for upload pod to start.")
    add(
        "--retry",
        default="5",
        help="When upload server returns a transient error, we retry this number of times before giving up",
    )
    add("--force-bind", action="store_true", help="Force bind the PVC, ignoring the WaitForFirstConsumer logic.")
    add("--datasource", action="store_true", help="Create a DataSource pointing to the created DataVolume/PVC.")
    add("--default-instancetype", default="", help="The default instance type to associate with the image.")
    add("--default-instancetype-kind", default="", help="The default instance type kind to associate with the image.")
    add("--default-preference", default="", help="The default preference to associate with the image.")
    add("--default-preference-kind", default="", help="The default preference kind to associate with the image.")


@dataclass
class UploadOptions:
    """The command's state after parseArgs: `image_path` is the archive's path for an archive upload."""

    name: str = ""
    size: str = ""
    image_path: str = ""
    archive_upload: bool = False
    create_pvc: bool = False
    volume_mode: str = ""
    storage_class: str = ""
    access_mode: str = ""
    uploadproxy_url: str = ""
    insecure: bool = False
    no_create: bool = False
    force_bind: bool = False
    datasource: bool = False
    wait_secs: int = 300
    retries: int = 5
    default_instancetype: str = ""
    default_instancetype_kind: str = ""
    default_preference: str = ""
    default_preference_kind: str = ""


def parse_uint(flag: str, value: str) -> int:
    """pflag's UintVar: strconv.ParseUint(value, 0, 64), with pflag's invalid-argument text."""
    cause = "invalid syntax"
    if _UINT.fullmatch(value):
        digits = value.replace("_", "")
        octal = len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()
        try:
            number = int(digits, 8 if octal else 0)
        except ValueError:  # "08": a leading 0 makes it octal for Go too
            number = -1
        if 0 <= number <= _MAX_UINT:
            return number
        if number > _MAX_UINT:
            cause = "value out of range"
    raise VirtctlError(f'invalid argument "{value}" for "{flag}" flag: strconv.ParseUint: parsing "{value}": {cause}')


def deprecation_lines(args: argparse.Namespace) -> list[str]:
    return [f"Flag {flag} has been deprecated, {DEPRECATED[flag]}" for flag in getattr(args, "deprecated_used", [])]


def check_flag_values(args: argparse.Namespace) -> tuple[int, int]:
    """The unsigned flags as pflag parses them (before cobra counts the arguments): (wait-secs, retry)."""
    return parse_uint("--wait-secs", str(args.wait_secs)), parse_uint("--retry", str(args.retry))


def parse_options(args: argparse.Namespace, wait_secs: int = 300, retries: int = 5) -> UploadOptions:
    """parseArgs then validateDefaultInstancetypeArgs, each check and text in KubeVirt's order."""
    positionals: list[str] = list(getattr(args, "positionals", None) or [])
    if len(positionals) > 2:
        raise VirtctlError(f"accepts at most 2 arg(s), received {len(positionals)}")
    opts = UploadOptions(
        name=args.pvc_name,
        size=args.size,
        image_path=args.image_path,
        volume_mode=args.volume_mode,
        storage_class=args.storage_class,
        access_mode=args.access_mode,
        uploadproxy_url=args.uploadproxy_url,
        insecure=args.insecure,
        no_create=args.no_create,
        force_bind=args.force_bind,
        datasource=args.datasource,
        wait_secs=wait_secs,
        retries=retries,
        default_instancetype=args.default_instancetype,
        default_instancetype_kind=args.default_instancetype_kind,
        default_preference=args.default_preference,
        default_preference_kind=args.default_preference_kind,
    )
    _parse_args(opts, args, positionals)
    _validate_default_instancetype(opts)
    return opts


def _parse_args(opts: UploadOptions, args: argparse.Namespace, positionals: list[str]) -> None:
    if opts.size and args.pvc_size and opts.size != args.pvc_size:
        raise VirtctlError("--pvc-size and --size can not be specified at the same time")
    if args.pvc_size:
        opts.size = args.pvc_size
    if opts.name:
        # The deprecated form returns here in KubeVirt: none of the checks below (nor --block-volume) apply.
        if positionals:
            raise VirtctlError("cannot use --pvc-name and args")
        opts.create_pvc = True
        return
    if args.block_volume:
        if not opts.volume_mode:
            opts.volume_mode = "block"
        elif opts.volume_mode != "block":
            raise VirtctlError(f"incompatible --volume-mode '{opts.volume_mode}' and --block-volume")
    if opts.volume_mode not in ("block", "filesystem", ""):
        raise VirtctlError(f"Invalid volume mode '{opts.volume_mode}'. Valid values are 'block' and 'filesystem'.")
    if not opts.image_path and not args.archive_path:
        raise VirtctlError("either image-path or archive-path must be provided")
    if opts.image_path and args.archive_path:
        raise VirtctlError("cannot handle both image-path and archive-path, provide only one")
    if args.archive_path:
        opts.archive_upload = True
        opts.image_path = args.archive_path
        if opts.volume_mode == "block":
            raise VirtctlError("In archive upload the volume mode should always be filesystem")
    if len(positionals) != 2:
        raise VirtctlError("expecting two args")
    kind = positionals[0].lower()
    if kind not in ("dv", "pvc"):
        raise VirtctlError(f"invalid resource type {positionals[0]}")
    opts.create_pvc = kind == "pvc"
    opts.name = positionals[1]


def _validate_default_instancetype(opts: UploadOptions) -> None:
    if not opts.default_instancetype and opts.default_instancetype_kind:
        raise VirtctlError("--default-instancetype must be provided with --default-instancetype-kind")
    if not opts.default_preference and opts.default_preference_kind:
        raise VirtctlError("--default-preference must be provided with --default-preference-kind")
    if (opts.default_instancetype or opts.default_preference) and opts.no_create:
        raise VirtctlError("--default-instancetype and --default-preference cannot be used with --no-create")


# ------------------------------------------------------------------------------------------------------ manifests


def default_labels(opts: UploadOptions, labels: dict[str, str] | None = None) -> dict[str, str]:
    """setDefaultInstancetypeLabels: the given labels plus each default instancetype/preference flag set."""
    result = dict(labels or {})
    for attr, label in DEFAULT_LABELS:
        if value := getattr(opts, attr):
            result[label] = value
    return result


def storage_quantity(size: str) -> str:
    """The size as the API stores it, or KubeVirt's validation text."""
    try:
        return str(Quantity.parse(size))
    except QuantityError as exc:
        raise VirtctlError(f"validation failed for size={size}: {exc}") from None


def check_access_mode(opts: UploadOptions) -> None:
    if opts.access_mode == "ReadOnlyMany":
        raise VirtctlError(READ_ONLY)


def content_type(opts: UploadOptions) -> str:
    return "archive" if opts.archive_upload else "kubevirt"


def pvc_manifest(opts: UploadOptions, namespace: str) -> dict[str, Any]:
    """createUploadPVC's claim (RenderPVC plus the upload annotations); the size is checked by the caller first."""
    spec: dict[str, Any] = {
        "accessModes": [opts.access_mode or "ReadWriteOnce"],
        "resources": {"requests": {"storage": storage_quantity(opts.size)}},
    }
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    if opts.volume_mode:
        spec["volumeMode"] = "Block" if opts.volume_mode == "block" else "Filesystem"
    annotations = {UPLOAD_TARGET: "", CONTENT_TYPE: content_type(opts)}
    if opts.force_bind:
        annotations[FORCE_BIND] = ""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": opts.name,
            "namespace": namespace,
            "annotations": annotations,
            "labels": default_labels(opts, {APPLY_STORAGE_PROFILE: "true"}),
        },
        "spec": spec,
    }


def storage_spec(opts: UploadOptions) -> dict[str, Any]:
    """createStorageSpec: size first, then class, access mode (ReadOnlyMany refused) and volume mode."""
    spec: dict[str, Any] = {"resources": {"requests": {"storage": storage_quantity(opts.size)}}}
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    if opts.access_mode:
        check_access_mode(opts)
        spec["accessModes"] = [opts.access_mode]
    if opts.volume_mode:
        spec["volumeMode"] = "Block" if opts.volume_mode == "block" else "Filesystem"
    return spec


def data_volume_manifest(opts: UploadOptions, namespace: str, storage: dict[str, Any]) -> dict[str, Any]:
    """createUploadDataVolume's DataVolume around a storage_spec."""
    meta: dict[str, Any] = {"name": opts.name, "namespace": namespace}
    if opts.force_bind:
        meta["annotations"] = {FORCE_BIND: ""}
    if labels := default_labels(opts):
        meta["labels"] = labels
    return {
        "apiVersion": f"{c.CDI_GROUP}/{c.CDI_VERSION}",
        "kind": c.DATA_VOLUME_KIND,
        "metadata": meta,
        "spec": {"source": {"upload": {}}, "contentType": content_type(opts), "storage": storage},
    }


def data_source_manifest(opts: UploadOptions, namespace: str) -> dict[str, Any]:
    """createNewDataSource: a DataSource of the same name pointing to the claim."""
    meta: dict[str, Any] = {"name": opts.name, "namespace": namespace}
    if labels := default_labels(opts):
        meta["labels"] = labels
    return {
        "apiVersion": f"{c.CDI_GROUP}/{c.CDI_VERSION}",
        "kind": c.DATA_SOURCE_KIND,
        "metadata": meta,
        "spec": {"source": {"pvc": {"name": opts.name, "namespace": namespace}}},
    }


def data_source_patch(opts: UploadOptions, namespace: str, existing: dict[str, Any]) -> list[dict[str, Any]]:
    """updateExistingDataSource's JSON patch: the labels (existing plus defaults) and the claim it points to."""
    labels = default_labels(opts, (existing.get("metadata") or {}).get("labels"))
    return [
        {"op": "replace", "path": "/metadata/labels", "value": labels},
        {"op": "replace", "path": "/spec/source/pvc", "value": {"name": opts.name, "namespace": namespace}},
    ]
