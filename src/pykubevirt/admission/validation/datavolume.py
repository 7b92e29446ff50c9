"""DataVolumes: KubeVirt's dataVolumeTemplates rules and CDI's own DataVolume admission checks (no lookups)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import int_value
from pykubevirt.api.causes import FIELD_VALUE_DUPLICATE, Cause, FieldPath, invalid, required
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get, parse_quantity

# CDI's DataVolumeSource members.
DATA_VOLUME_SOURCES = ("http", "s3", "gcs", "registry", "pvc", "upload", "blank", "imageio", "vddk", "snapshot")
_ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany")
_URL_SOURCES = (("http", "HTTP"), ("s3", "S3"), ("imageio", "Imageio"), ("vddk", "VDDK"))
_REGISTRY_SCHEMES = ("docker", "oci-archive", "image-stream")


def _count_sources(source: Mapping[str, Any]) -> int:
    return sum(source.get(key) is not None for key in DATA_VOLUME_SOURCES)


def validate_datavolume_templates(field: FieldPath, vm_spec: Mapping[str, Any]) -> list[Cause]:
    """storageadmitters.ValidateDataVolumeTemplate; `field` is the VM spec path."""
    causes: list[Cause] = []
    volumes = [as_map(v) for v in as_list(get(vm_spec, "template", "spec", "volumes"))]
    for idx, raw in enumerate(as_list(vm_spec.get("dataVolumeTemplates"))):
        template = as_map(raw)
        path = field.child("dataVolumeTemplate").index(idx)
        problem = _template_problem(path, template)
        if problem:
            causes += problem
            continue
        name = as_str(get(template, "metadata", "name"))
        referenced = any(
            as_str(get(v, "persistentVolumeClaim", "claimName")) == name
            if v.get("persistentVolumeClaim") is not None
            else v.get("dataVolume") is not None and as_str(get(v, "dataVolume", "name")) == name
            for v in volumes
        )
        if not referenced:
            causes.append(
                required(
                    str(path),
                    f"DataVolumeTemplate entry {path} must be referenced in the VMI template's 'volumes' list",
                )
            )
    return causes


def _template_problem(path: FieldPath, template: Mapping[str, Any]) -> list[Cause]:
    if not as_str(get(template, "metadata", "name")):
        name_path = path.child("name")
        return [required(str(name_path), f"'name' field must not be empty for DataVolumeTemplate entry {name_path}.")]
    spec = as_map(template.get("spec"))
    pvc, storage = spec.get("pvc"), spec.get("storage")
    if pvc is None and storage is None:
        return [invalid(str(path.child("PVC", "Storage")), "Missing Data volume PVC or Storage")]
    if pvc is not None and storage is not None:
        return [
            invalid(
                str(path.child("PVC", "Storage")),
                "Duplicate storage definition, both target storage and target pvc defined",
            )
        ]
    target = pvc if pvc is not None else storage
    populated = get(target, "dataSourceRef") is not None or get(target, "dataSource") is not None
    has_source = spec.get("source") is not None or spec.get("sourceRef") is not None
    if populated and has_source:
        return [invalid(str(path.child("source")), "External population is incompatible with Source and SourceRef")]
    if not populated and not has_source:
        return [
            invalid(
                str(path.child("source", "sourceRef")),
                "Data volume should have either Source, SourceRef, or be externally populated",
            )
        ]
    if spec.get("source") is not None:
        count = _count_sources(as_map(spec.get("source")))
        if count == 0:
            return [invalid(str(path.child("source")), "Missing dataVolume valid source")]
        if count > 1:
            return [invalid(str(path.child("source")), "Multiple dataVolume sources")]
    return []


def validate_datavolume_template_namespaces(vm: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    """Embedded DataVolumes are created in the VM's namespace; checked on create and when the templates change."""
    templates = as_list(get(vm, "spec", "dataVolumeTemplates"))
    if old is not None and as_list(get(old, "spec", "dataVolumeTemplates")) == templates:
        return []
    namespace = as_str(get(vm, "metadata", "namespace")) or "default"
    causes: list[Cause] = []
    for idx, template in enumerate(templates):
        ns = as_str(get(template, "metadata", "namespace"))
        if ns and ns != namespace:
            causes.append(
                invalid(
                    str(FieldPath("spec").child("dataVolumeTemplates").index(idx)),
                    f"Embedded DataVolume namespace {ns} differs from VM namespace {namespace}",
                )
            )
    return causes


def validate_datavolume(
    obj: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """CDI's DataVolume validating webhook, minus its PVC/DataSource lookups. The first problem is the answer."""
    if old is not None and as_map(old.get("spec")) != as_map(obj.get("spec")):
        return [Cause(FIELD_VALUE_DUPLICATE, "Cannot update DataVolume Spec", "DataVolume.Spec")]
    if len(as_str(get(obj, "metadata", "name"))) > 253:
        return [invalid("", "Name of data volume cannot be more than 253 characters")]
    return _spec_problem(FieldPath("spec"), as_map(obj.get("spec")))


def _storage_size_problem(target: Any, field: FieldPath, name: str, *, required_size: bool) -> list[Cause]:
    requests = get(target, "resources", "requests")
    size_path = str(field.child(name, "resources", "requests", "size"))
    if not isinstance(requests, Mapping) or "storage" not in requests:
        return [invalid(size_path, f"{name} size is missing")] if required_size else []
    size = parse_quantity(requests["storage"])
    if size is None or size.is_zero() or int_value(size) < 0:
        return [invalid(size_path, f"{name} size can't be equal or less than zero")]
    return []


def _spec_problem(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    pvc, storage = spec.get("pvc"), spec.get("storage")
    if pvc is None and storage is None:
        return [invalid(str(field.child("PVC")), "Missing Data volume PVC")]
    if pvc is not None and storage is not None:
        return [
            invalid(
                str(field.child("PVC", "Storage")),
                "Duplicate storage definition, both target storage and target pvc defined",
            )
        ]
    modes_path = str(field.child("PVC", "accessModes"))
    if pvc is not None:
        problem = _storage_size_problem(pvc, field, "PVC", required_size=True)
        if problem:
            return problem
        modes = as_list(get(pvc, "accessModes"))
        if not modes:
            return [invalid(modes_path, "Required value: at least 1 access mode is required")]
        if len(modes) > 1:
            return [invalid(modes_path, "PVC multiple accessModes")]
        modes_to_check = modes
    else:
        # CDI sizes `storage` targets itself when the size is left out, so only a bad size is an error here.
        problem = _storage_size_problem(storage, field, "Storage", required_size=False)
        if problem:
            return problem
        modes_to_check = as_list(get(storage, "accessModes"))
    for mode in modes_to_check:
        if mode not in _ACCESS_MODES:
            return [
                invalid(
                    modes_path,
                    f'Unsupported value: "{modes_to_check[0]}": supported values: '
                    '"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce"',
                )
            ]
    source, source_ref = spec.get("source"), spec.get("sourceRef")
    if (source is None) == (source_ref is None):
        return [invalid(str(field.child("source")), "Data volume should have either Source or SourceRef")]
    if source_ref is not None:
        return _source_ref_problem(field, as_map(source_ref))
    return _source_problem(field, as_map(source), as_str(spec.get("contentType")))


def _source_ref_problem(field: FieldPath, ref: Mapping[str, Any]) -> list[Cause]:
    kind = as_str(ref.get("kind"))
    if not kind:
        return [invalid(str(field.child("sourceRef", "Kind")), "Missing sourceRef kind")]
    if kind != "DataSource":
        return [
            invalid(
                str(field.child("sourceRef", "Kind")),
                f"Unsupported sourceRef kind {kind}, currently only DataSource is supported",
            )
        ]
    if not as_str(ref.get("name")):
        return [invalid(str(field.child("sourceRef", "Name")), "Missing sourceRef name")]
    return []


def _source_problem(field: FieldPath, source: Mapping[str, Any], content_type: str) -> list[Cause]:
    count = _count_sources(source)
    if count == 0:
        return [invalid(str(field.child("source")), "Missing Data volume source")]
    if count > 1:
        return [invalid(str(field.child("source")), "Multiple Data volume sources")]
    for key, label in _URL_SOURCES:
        if source.get(key) is not None:
            error = _url_problem(as_str(get(source, key, "url")))
            if error:
                return [invalid(str(field.child("source", label, "url")), f"{field.child('source')} {error}")]
            break
    content_path = str(field.child("contentType"))
    if content_type not in ("", "kubevirt", "archive"):
        return [invalid(content_path, "ContentType not one of: kubevirt, archive")]
    if source.get("blank") is not None and content_type == "archive":
        return [invalid(content_path, "SourceType cannot be blank and the contentType be archive")]
    registry = source.get("registry")
    if registry is not None:
        if content_type not in ("", "kubevirt"):
            return [invalid(content_path, "ContentType must be kubevirt when Source is Registry")]
        url = as_str(get(registry, "url"))
        if urlsplit(url).scheme not in _REGISTRY_SCHEMES:
            return [invalid(str(field.child("source", "Registry", "URL")), f"Illegal registry source URL scheme {url}")]
        method = as_str(get(registry, "pullMethod"))
        if method not in ("", "pod", "node"):
            return [
                invalid(
                    str(field.child("source", "Registry", "importMethod")),
                    f'ImportMethod {method} is neither pod, node or ""',
                )
            ]
    for key, label, needed in (
        ("imageio", "Imageio", ("secretRef", "certConfigMap", "diskId")),
        ("vddk", "VDDK", ("secretRef", "uuid", "backingFile", "thumbprint")),
        ("pvc", "PVC", ("namespace", "name")),
    ):
        value = source.get(key)
        if value is not None and not all(as_str(get(value, n)) for n in needed):
            path = field.child("source", label)
            return [invalid(str(path), f"{path} source {label} is not valid")]
    return []


def _url_problem(url: str) -> str:
    if not url:
        return "source URL is empty"
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"Invalid source URL: {url}"
    if not parts.scheme:
        return f"Invalid source URL: {url}"
    if parts.scheme not in ("http", "https"):
        return f"Invalid source URL scheme: {url}"
    return ""
