"""Server-side Table printing: CRD printer columns and kube-apiserver's printers for the built-in kinds."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pykubevirt.api import json_codec
from pykubevirt.api.timestamps import format_time
from pykubevirt.apiserver.jsonpath import CompiledPath, JSONPathError, compile_path
from pykubevirt.apiserver.pod_printing import pod_summary, readiness_gates

Column = dict[str, Any]
Columns = list[Column]
Rows = list[list[Any]]
Table = tuple[Columns, Rows]


def clock() -> datetime:
    """The time ages are measured against; tests monkeypatch it."""
    return datetime.now(UTC)


# --- time -----------------------------------------------------------------------------------------------------------

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 timestamp as metav1.Time accepts it, or None when it is not one."""
    if not _RFC3339.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def human_duration(delta: timedelta) -> str:
    """duration.HumanDuration: about two significant figures ("45s", "3m2s", "5h10m", "2d3h", "2y100d")."""
    micros = delta // timedelta(microseconds=1)
    # Go truncates toward zero; up to one second in the future still reads as "0s" (clock skew).
    if micros <= -2_000_000:
        return "<invalid>"
    if micros < 0:
        return "0s"
    seconds = micros // 1_000_000
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def since(timestamp: Any, now: datetime) -> str:
    """translateTimestampSince: the age of a timestamp, "<unknown>" when unset."""
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    parsed = parse_time(timestamp)
    return "<invalid>" if parsed is None else human_duration(now - parsed)


def age_cell(obj: dict[str, Any], now: datetime) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def name_cell(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


# --- column definitions ---------------------------------------------------------------------------------------------


def column(name: str, description: str, type_: str = "string", *, priority: int = 0, format_: str = "") -> Column:
    """A meta.k8s.io TableColumnDefinition (all five fields are always serialised)."""
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


NAME_DESCRIPTION = (
    "Name must be unique within a namespace. It identifies the object in URLs and on the command line, "
    "and cannot be changed once the object exists."
)
AGE_DESCRIPTION = "How long ago the server created this object (from metadata.creationTimestamp)."
NAME = column("Name", NAME_DESCRIPTION, format_="name")
AGE = column("Age", AGE_DESCRIPTION)


# --- custom resources (apiextensions-apiserver tableconvertor) ------------------------------------------------------

# A CRD without additionalPrinterColumns prints its Age.
DEFAULT_CRD_COLUMNS = (
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": AGE_DESCRIPTION},
)


def _go_float(value: float) -> str:
    """Go's %v for a float64: shortest digits, in exponent form below 1e-4 and from 1e6 on."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    point = len(mantissa) + exponent  # digits before the decimal point
    prefix = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        tail = "." + mantissa[1:] if len(mantissa) > 1 else ""
        return f"{prefix}{mantissa[0]}{tail}e{'+' if point - 1 >= 0 else '-'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{mantissa}"
    if point >= len(mantissa):
        return prefix + mantissa + "0" * (point - len(mantissa))
    return f"{prefix}{mantissa[:point]}.{mantissa[point:]}"


def go_text(value: Any) -> str:
    """How the JSONPath printer renders one value: maps and lists as JSON, scalars as Go's fmt prints them."""
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, dict | list):
        # Go's encoding/json sorts keys, writes no spaces and escapes <, > and & for HTML safety.
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=json_codec.decoded_json
        )
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return str(value)


def _typed_cell(column_type: str, value: Any, now: datetime) -> Any:
    """cellForJSONValue: a value of the wrong type for its column prints as null."""
    if value is None:
        return None
    if column_type == "string":
        return go_text(value)
    if column_type == "integer" and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return int(value)
    if column_type == "number" and not isinstance(value, bool) and isinstance(value, int | float):
        return float(value)
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        return "<unknown>" if value == "null" else since(value, now)
    return None


def _compile_column(json_path: str) -> CompiledPath | None:
    try:
        return compile_path("{" + json_path + "}")
    except JSONPathError:
        return None  # the CRD validator rejects these; printing an empty column beats failing every `get`


def crd_columns_table(
    printer_columns: list[dict[str, Any]], objects: list[dict[str, Any]], now: datetime
) -> tuple[Columns, Rows]:
    """Columns and cells for custom resources: Name, then each additionalPrinterColumn (Age when there are none)."""
    specs = list(printer_columns) or list(DEFAULT_CRD_COLUMNS)
    columns = [dict(NAME)]
    paths: list[tuple[str, CompiledPath | None]] = []
    for spec in specs:
        json_path = str(spec.get("jsonPath", ""))
        description = spec.get("description") or f"Custom resource definition column (in JSONPath format): {json_path}"
        columns.append(
            column(
                str(spec.get("name", "")),
                description,
                str(spec.get("type", "string")),
                priority=int(spec.get("priority") or 0),
                format_=str(spec.get("format") or ""),
            )
        )
        paths.append((str(spec.get("type", "string")), _compile_column(json_path)))
    rows: Rows = []
    for obj in objects:
        cells: list[Any] = [name_cell(obj)]
        for column_type, path in paths:
            # Only the first match counts: printer columns are meant to be simple paths.
            found = path.evaluate(obj) if path is not None else []
            cells.append(_typed_cell(column_type, found[0], now) if found else None)
        rows.append(cells)
    return columns, rows


# --- the Table object -----------------------------------------------------------------------------------------------


def build_table(
    columns: Columns | None,
    rows: Rows,
    objects: list[dict[str, Any]],
    *,
    include_object: str = "Metadata",
    list_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table; each row carries PartialObjectMetadata, the whole object, or nothing (includeObject)."""
    meta: dict[str, Any] = {}
    for key in ("resourceVersion", "continue", "remainingItemCount"):
        if list_meta and list_meta.get(key) not in (None, ""):
            meta[key] = list_meta[key]
    table_rows: list[dict[str, Any]] = []
    for cells, obj in zip(rows, objects, strict=True):
        row: dict[str, Any] = {"cells": cells}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        table_rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": list(columns or []),
        "rows": table_rows,
    }


# --- built-in kinds (pkg/printers/internalversion/printers.go) ------------------------------------------------------

Printer = Callable[[dict[str, Any], datetime], list[Any]]


def printed_table(columns: Columns, printer: Printer, objects: list[dict[str, Any]], now: datetime | None) -> Table:
    moment = now or clock()
    return [dict(c) for c in columns], [printer(obj, moment) for obj in objects]


NAMESPACE_COLUMNS = [NAME, column("Status", "Whether the namespace is Active or Terminating."), AGE]


def namespace_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get namespaces."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        phase = (obj.get("status") or {}).get("phase")
        if not phase:  # the real server always sets it; fall back to what it would have set
            phase = "Terminating" if (obj.get("metadata") or {}).get("deletionTimestamp") else "Active"
        return [name_cell(obj), phase, age_cell(obj, now)]

    return printed_table(NAMESPACE_COLUMNS, row, objects, now)


NODE_COLUMNS = [
    NAME,
    column("Status", "Ready, NotReady or Unknown, and SchedulingDisabled when cordoned."),
    column("Roles", "Roles from the node-role.kubernetes.io/<role> labels."),
    AGE,
    column("Version", "The kubelet version the node reports."),
    column("Internal-IP", "The node's first InternalIP address.", priority=1),
    column("External-IP", "The node's first ExternalIP address.", priority=1),
    column("OS-Image", "The operating system image the node reports.", priority=1),
    column("Kernel-Version", "The kernel version the node reports.", priority=1),
    column("Container-Runtime", "The container runtime and version the node reports.", priority=1),
]


def _node_address(obj: dict[str, Any], kind: str) -> str:
    for address in (obj.get("status") or {}).get("addresses") or ():
        if address.get("type") == kind:
            return str(address.get("address", ""))
    return "<none>"


def node_roles(labels: dict[str, str]) -> str:
    roles = set()
    for key, value in labels.items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def node_status(obj: dict[str, Any]) -> str:
    ready = None
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            ready = condition  # the last one wins, as in the Go map
    status = ["Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"]
    if (obj.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def node_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get nodes (-o wide)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        info = (obj.get("status") or {}).get("nodeInfo") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return [
            name_cell(obj),
            node_status(obj),
            node_roles(labels),
            age_cell(obj, now),
            info.get("kubeletVersion", ""),
            _node_address(obj, "InternalIP"),
            _node_address(obj, "ExternalIP"),
            info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>",
        ]

    return printed_table(NODE_COLUMNS, row, objects, now)


POD_COLUMNS = [
    NAME,
    column("Ready", "Ready containers out of all containers (sidecars included)."),
    column("Status", "The pod's phase, or why it is not running as its containers and init containers report."),
    column("Restarts", "Container restarts, and how long ago the last one was."),
    AGE,
    column("IP", "The pod's first IP address.", priority=1),
    column("Node", "The node the pod is bound to.", priority=1),
    column("Nominated Node", "The node preemption nominated for the pod.", priority=1),
    column("Readiness Gates", "Readiness gates that are true out of all readiness gates.", priority=1),
]


def pod_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get pods (-o wide)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        summary = pod_summary(obj)
        restarts = str(summary.restarts)
        if summary.restarts and summary.last_restart is not None:
            restarts += f" ({human_duration(now - summary.last_restart)} ago)"
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        pod_ips = status.get("podIPs") or []
        ip = (pod_ips[0].get("ip") if pod_ips else None) or status.get("podIP") or "<none>"
        return [
            name_cell(obj),
            f"{summary.ready}/{summary.total}",
            summary.reason,
            restarts,
            age_cell(obj, now),
            ip,
            spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            readiness_gates(obj),
        ]

    return printed_table(POD_COLUMNS, row, objects, now)


EVENT_COLUMNS = [
    column("Last Seen", "How long ago the event was last observed."),
    column("Type", "Normal or Warning."),
    column("Reason", "A short machine-readable reason for the event."),
    column("Object", "The object the event is about, as kind/name."),
    column("Subobject", "The part of the object the event is about (involvedObject.fieldPath).", priority=1),
    column("Source", "The component (and host) that reported the event.", priority=1),
    column("Message", "A human-readable description of what happened."),
    column("First Seen", "How long ago the event was first observed.", priority=1),
    column("Count", "How many times the event was observed.", priority=1),
    column("Name", NAME_DESCRIPTION, priority=1, format_="name"),
]


def event_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get events (-o wide)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        first = since(obj.get("firstTimestamp"), now) if obj.get("firstTimestamp") else since(obj.get("eventTime"), now)
        last = since(obj.get("lastTimestamp"), now) if obj.get("lastTimestamp") else first
        count = obj.get("count") or 0
        series = obj.get("series")
        if series:
            last = since(series.get("lastObservedTime"), now)
            count = series.get("count") or 0
        elif not count:
            count = 1  # singleton events have no count in events.k8s.io/v1
        involved = obj.get("involvedObject") or {}
        kind = str(involved.get("kind", "")).lower()
        target = f"{kind}/{involved['name']}" if involved.get("name") else kind
        source = obj.get("source") or {}
        component = source.get("component") or obj.get("reportingController") or ""
        host = source.get("host") or obj.get("reportingInstance") or ""
        return [
            last,
            obj.get("type", ""),
            obj.get("reason", ""),
            target,
            involved.get("fieldPath", ""),
            f"{component}, {host}" if host else component,
            str(obj.get("message", "")).strip(),
            first,
            int(count),
            name_cell(obj),
        ]

    return printed_table(EVENT_COLUMNS, row, objects, now)


CONFIGMAP_COLUMNS = [NAME, column("Data", "Number of keys in data and binaryData."), AGE]


def configmap_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get configmaps."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [name_cell(obj), len(obj.get("data") or {}) + len(obj.get("binaryData") or {}), age_cell(obj, now)]

    return printed_table(CONFIGMAP_COLUMNS, row, objects, now)


SECRET_COLUMNS = [
    NAME,
    column("Type", "The secret type, which says how its data is used."),
    column("Data", "Number of keys in data."),
    AGE,
]


def secret_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get secrets."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        # kube-apiserver defaults an empty type to Opaque on create.
        return [name_cell(obj), obj.get("type") or "Opaque", len(obj.get("data") or {}), age_cell(obj, now)]

    return printed_table(SECRET_COLUMNS, row, objects, now)


SERVICEACCOUNT_COLUMNS = [NAME, column("Secrets", "Number of secrets listed in the service account."), AGE]


def serviceaccount_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get serviceaccounts."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [name_cell(obj), len(obj.get("secrets") or []), age_cell(obj, now)]

    return printed_table(SERVICEACCOUNT_COLUMNS, row, objects, now)


CONTROLLERREVISION_COLUMNS = [
    NAME,
    column("Controller", "The controlling owner, as kind.group/name."),
    column("Revision", "The revision number of the recorded state."),
    AGE,
]


def controller_name(obj: dict[str, Any]) -> str:
    """The controller owner reference as `kind.group/name` in lower case, or <none>."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            kind = str(ref.get("kind", ""))
            group_kind = f"{kind}.{group}" if group else kind
            return f"{group_kind.lower()}/{ref.get('name', '')}" if group_kind else str(ref.get("name", ""))
    return "<none>"


def controllerrevision_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get controllerrevisions."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [name_cell(obj), controller_name(obj), int(obj.get("revision") or 0), age_cell(obj, now)]

    return printed_table(CONTROLLERREVISION_COLUMNS, row, objects, now)


LEASE_COLUMNS = [NAME, column("Holder", "The identity currently holding the lease."), AGE]


def lease_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get leases."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [name_cell(obj), (obj.get("spec") or {}).get("holderIdentity") or "", age_cell(obj, now)]

    return printed_table(LEASE_COLUMNS, row, objects, now)


# CRDs use the apiserver's default table convertor: the name and an absolute creation time.
CRD_COLUMNS = [NAME, column("Created At", "When the server created this object.", "date")]


def crd_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get customresourcedefinitions."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        created = parse_time(str((obj.get("metadata") or {}).get("creationTimestamp") or ""))
        # Go formats the zero time when the timestamp is unset.
        text = format_time(created) if created else "0001-01-01T00:00:00Z"
        return [name_cell(obj), text]

    return printed_table(CRD_COLUMNS, row, objects, now)
