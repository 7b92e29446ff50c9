"""The volumes of `virtctl create vm` (pkg/virtctl/create/vm): containerdisks, PVCs, DataVolume templates and sysprep,
each a volume of the VM's template, with its disk when a boot order was asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pykubevirt.api.name_validation import dns1123_label_errors
from pykubevirt.virtctl.create_params import (
    ParamKind,
    flag_error,
    map_params,
    param_by_name,
    random_suffix,
    split_prefixed_name,
    supported,
)

CONTAINERDISK_FLAG = "volume-containerdisk"
PVC_FLAG = "volume-pvc"
IMPORT_FLAG = "volume-import"
SYSPREP_FLAG = "volume-sysprep"
SYSPREP_DISK = "sysprepdisk"

VOLUME_PARAMS: dict[str, ParamKind] = {"name": "string", "src": "string", "bootorder": "uint"}
SYSPREP_PARAMS: dict[str, ParamKind] = {"src": "string", "type": "string"}
_COMMON: dict[str, ParamKind] = {"size": "quantity", "type": "string", "name": "string", "bootorder": "uint"}
_SOURCE_PARAMS: dict[str, ParamKind] = {"name": "string", "src": "string", **_COMMON}
# Each import type's parameters, in upstream's struct order (its help lists them so).
IMPORT_PARAMS: dict[str, dict[str, ParamKind]] = {
    "blank": _COMMON,
    "gcs": {"secretref": "string", "url": "string", **_COMMON},
    "http": {
        **{"certconfigmap": "string", "extraheaders": "strings", "secretextraheaders": "strings"},
        **{"secretref": "string", "url": "string"},
        **_COMMON,
    },
    "imageio": {"certconfigmap": "string", "diskid": "string", "secretref": "string", "url": "string", **_COMMON},
    "pvc": _SOURCE_PARAMS,
    "registry": {
        **{"certconfigmap": "string", "imagestream": "string", "pullmethod": "string"},
        **{"secretref": "string", "url": "string"},
        **_COMMON,
    },
    "s3": {"certconfigmap": "string", "secretref": "string", "url": "string", **_COMMON},
    "vddk": {
        **{"backingfile": "string", "initimageurl": "string", "secretref": "string", "thumbprint": "string"},
        **{"url": "string", "uuid": "string"},
        **_COMMON,
    },
    "snapshot": _SOURCE_PARAMS,
    "ds": _SOURCE_PARAMS,
}
# A clone (of a PVC, a snapshot, a DataSource) takes the source's size when none is given.
SIZE_OPTIONAL = frozenset({"pvc", "snapshot", "ds"})

Params = dict[str, Any]


class Volumes:
    """Adds volumes to a VM manifest, keeping the boot orders already taken."""

    def __init__(self, vm: dict[str, Any]) -> None:
        self.vm = vm
        self.spec: dict[str, Any] = vm["spec"]["template"]["spec"]
        self.boot_orders: dict[int, str] = {}

    def exists(self, name: str) -> bool:
        return any(volume["name"] == name for volume in self.spec.get("volumes", []))

    def _add(self, flag: str, name: str, source: dict[str, Any], boot_order: int | None) -> None:
        if self.exists(name):
            raise flag_error(flag, f'there is already a volume with name "{name}"')
        self.spec.setdefault("volumes", []).append({"name": name, **source})
        if boot_order is None:
            return
        if boot_order == 0:
            raise flag_error(flag, "bootorder must be greater than 0")
        if boot_order in self.boot_orders:
            raise flag_error(flag, f"bootorder {boot_order} was specified multiple times")
        self.spec["domain"].setdefault("devices", {}).setdefault("disks", []).append(
            {"name": name, "bootOrder": boot_order}
        )
        self.boot_orders[boot_order] = name

    def containerdisks(self, values: list[str]) -> None:
        for index, value in enumerate(values):
            params = map_params(CONTAINERDISK_FLAG, value, VOLUME_PARAMS)
            if not params.get("src"):
                raise flag_error(CONTAINERDISK_FLAG, "src must be specified")
            name = str(params.get("name") or f"{self.vm['metadata']['name']}-containerdisk-{index}")
            _check_name(CONTAINERDISK_FLAG, name)
            self._add(CONTAINERDISK_FLAG, name, {"containerDisk": {"image": params["src"]}}, _order(params))

    def pvcs(self, values: list[str]) -> None:
        for value in values:
            params = map_params(PVC_FLAG, value, VOLUME_PARAMS)
            namespace, claim = _source(PVC_FLAG, params)
            if namespace:
                raise flag_error(PVC_FLAG, f'not allowed to specify namespace of pvc "{claim}"')
            name = str(params.get("name") or claim)
            _check_name(PVC_FLAG, name)
            self._add(PVC_FLAG, name, {"persistentVolumeClaim": {"claimName": claim}}, _order(params))

    def imports(self, values: list[str]) -> None:
        for value in values:
            try:
                kind = param_by_name("type", value)
            except ValueError as exc:
                raise flag_error(IMPORT_FLAG, str(exc)) from None
            if kind is None:
                raise flag_error(IMPORT_FLAG, "type must be specified")
            if kind not in IMPORT_PARAMS:
                raise flag_error(IMPORT_FLAG, f'invalid volume import type "{kind}", see help for supported values')
            params = map_params(IMPORT_FLAG, value, IMPORT_PARAMS[kind])
            spec = _IMPORT_SOURCES[kind](params)
            if "size" not in params and kind not in SIZE_OPTIONAL:
                raise flag_error(IMPORT_FLAG, "size must be specified")
            name = str(params["name"]) if "name" in params else f"imported-volume-{random_suffix()}"
            _check_name(IMPORT_FLAG, name)
            storage: dict[str, Any] = {"resources": {}}
            if "size" in params:
                storage["resources"] = {"requests": {"storage": str(params["size"])}}
            self._add(IMPORT_FLAG, name, {"dataVolume": {"name": name}}, _order(params))
            template = {"metadata": {"name": name}, "spec": {**spec, "storage": storage}}
            self.vm["spec"].setdefault("dataVolumeTemplates", []).append(template)

    def sysprep(self, value: str) -> None:
        params = map_params(SYSPREP_FLAG, value, SYSPREP_PARAMS)
        namespace, name = _source(SYSPREP_FLAG, params)
        if namespace:
            raise flag_error(SYSPREP_FLAG, f'not allowed to specify namespace of configmap or secret "{name}"')
        if self.exists(SYSPREP_DISK):
            raise flag_error(SYSPREP_FLAG, f'there is already a volume with name "{SYSPREP_DISK}"')
        kind = str(params.get("type") or "configmap")
        keys = {"configmap": "configMap", "secret": "secret"}
        if kind.lower() not in keys:
            raise flag_error(
                SYSPREP_FLAG, f'invalid sysprep source type "{kind}", supported values are: configmap, secret'
            )
        self._add(SYSPREP_FLAG, SYSPREP_DISK, {"sysprep": {keys[kind.lower()]: {"name": params["src"]}}}, None)


def import_help() -> str:
    """--volume-import's help: each type and its parameters."""
    return "\n".join(f"  type {kind} - {supported(params)}" for kind, params in IMPORT_PARAMS.items())


def _order(params: Params) -> int | None:
    value = params.get("bootorder")
    return int(value) if value is not None else None


def _check_name(flag: str, name: str) -> None:
    if errors := dns1123_label_errors(name):
        raise flag_error(flag, f'invalid name "{name}": {",".join(errors)}')


def _source(flag: str, params: Params) -> tuple[str, str]:
    if not params.get("src"):
        raise flag_error(flag, "src must be specified")
    try:
        return split_prefixed_name(str(params["src"]))
    except ValueError as exc:
        raise flag_error(flag, f"src invalid: {exc}") from None


def _clone(kind: str) -> Callable[[Params], dict[str, Any]]:
    """A PVC or a snapshot in another namespace, which must be named."""

    def source(params: Params) -> dict[str, Any]:
        namespace, name = _source(IMPORT_FLAG, params)
        if not namespace:
            raise flag_error(IMPORT_FLAG, f'namespace of {kind} "{name}" must be specified')
        return {"source": {kind: {"name": name, "namespace": namespace}}}

    return source


def _data_source(params: Params) -> dict[str, Any]:
    namespace, name = _source(IMPORT_FLAG, params)
    ref: dict[str, Any] = {"kind": "DataSource", "name": name}
    if namespace:
        ref["namespace"] = namespace
    return {"sourceRef": ref}


def _url_source(kind: str, key: str, fields: dict[str, str], *required: str) -> Callable[[Params], dict[str, Any]]:
    """A source with a URL; `fields` maps parameters to the source's JSON fields, empty ones left out."""

    def source(params: Params) -> dict[str, Any]:
        missing = [name for name in required if not params.get(name)]
        if missing and kind == "imageio":
            raise flag_error(IMPORT_FLAG, "url and diskid are both required with imageio volume source")
        for name in missing:
            raise flag_error(IMPORT_FLAG, f"{name} is required with {kind} volume source")
        body = {field: params[param] for param, field in fields.items() if params.get(param)}
        return {"source": {key: body}}

    return source


def _registry(params: Params) -> dict[str, Any]:
    method = params.get("pullmethod")
    if method and method not in ("pod", "node"):
        raise flag_error(IMPORT_FLAG, "pullmethod must be set to pod or node")
    if bool(params.get("url")) == bool(params.get("imagestream")):
        raise flag_error(IMPORT_FLAG, "exactly one of url or imagestream must be defined")
    fields = {"pullmethod": "pullMethod", "certconfigmap": "certConfigMap", "imagestream": "imageStream"}
    fields |= {"url": "url", "secretref": "secretRef"}
    return {"source": {"registry": {field: params[p] for p, field in fields.items() if params.get(p)}}}


_SECRET_CERT = {"secretref": "secretRef", "certconfigmap": "certConfigMap"}
_IMPORT_SOURCES: dict[str, Callable[[Params], dict[str, Any]]] = {
    "blank": lambda params: {"source": {"blank": {}}},
    "gcs": _url_source("gcs", "gcs", {"url": "url", "secretref": "secretRef"}, "url"),
    "http": _url_source(
        "http",
        "http",
        {"url": "url", **_SECRET_CERT, "extraheaders": "extraHeaders", "secretextraheaders": "secretExtraHeaders"},
        "url",
    ),
    "imageio": _url_source("imageio", "imageio", {"url": "url", "diskid": "diskId", **_SECRET_CERT}, "url", "diskid"),
    "pvc": _clone("pvc"),
    "registry": _registry,
    "s3": _url_source("s3", "s3", {"url": "url", **_SECRET_CERT}, "url"),
    "vddk": _url_source(
        "vddk",
        "vddk",
        {
            **{"url": "url", "uuid": "uuid", "thumbprint": "thumbprint", "secretref": "secretRef"},
            **{"initimageurl": "initImageURL", "backingfile": "backingFile"},
        },
        *("url", "uuid", "thumbprint", "secretref", "backingfile"),
    ),
    "snapshot": _clone("snapshot"),
    "ds": _data_source,
}
