"""Structured logs: one JSON object a line, naming the component and the object (kind, namespace/name) involved."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

# Extra record attributes copied into each line when present, and the key each gets in the line. The object's name
# travels as `obj_name` because LogRecord already has a `name` (the logger's).
OBJECT_FIELDS = {
    "kind": "kind",
    "namespace": "namespace",
    "obj_name": "name",
    "uid": "uid",
    "node": "node",
    "reason": "reason",
    "phase": "phase",
    "pod": "pod",
    "duration_ms": "duration_ms",
    "count": "count",
    # What inside the component wrote the line (KubeVirt's virt-launcher: "libvirt" for the daemon's own lines, with
    # libvirt's thread; LogRecord has a `thread` of its own).
    "subcomponent": "subcomponent",
    "libvirt_thread": "thread",
}


class JSONFormatter(logging.Formatter):
    """Formats records the way KubeVirt's components log: JSON with component, level, msg and timestamp."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "component": self.component,
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            # A line relayed from another program keeps that program's position (libvirt's function:line), or has
            # none when that program gave none: the relay's own would mislead.
            "pos": record.__dict__["position"]
            if "position" in record.__dict__
            else f"{record.module}.py:{record.lineno}",
            "timestamp": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        if line["pos"] is None:
            del line["pos"]
        for attribute, key in OBJECT_FIELDS.items():
            value = record.__dict__.get(attribute)
            if value not in (None, ""):
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


def configure(component: str, *, level: int = logging.INFO, stream: IO[str] | None = None) -> None:
    """Send every pykubevirt logger to `stream` (stderr by default) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter(component))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


# KubeVirt's default verbosity of every component (virtconfig.DefaultVirt*LogVerbosity).
DEFAULT_VERBOSITY = 2
# From this verbosity on a component writes its debug lines: KubeVirt's components log V(3) and above only when their
# verbosity is raised, as with `virtctl adm log-verbosity`.
DEBUG_VERBOSITY = 3
# The verbosity this process runs at: logging's level is process-wide, and so is the KubeVirt object's setting.
_verbosity = DEFAULT_VERBOSITY


def set_verbosity(verbosity: int) -> bool:
    """Run at `verbosity` (debug lines from 3 on); nothing happens while it stays the one in effect (the default 2 at
    start), so components call it with every configuration they read. True when logging's level changed."""
    global _verbosity
    if verbosity == _verbosity:
        return False
    _verbosity = verbosity
    logging.getLogger("pykubevirt.log").info("log verbosity set to %d", verbosity)
    level = logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO
    root = logging.getLogger()
    if root.level == level:
        return False
    root.setLevel(level)
    return True


def object_fields(obj: dict[str, Any] | None, **more: Any) -> dict[str, Any]:
    """`extra=` for a log call about `obj`: its kind, namespace, name and uid."""
    meta = (obj or {}).get("metadata") or {}
    fields: dict[str, Any] = {
        "kind": (obj or {}).get("kind"),
        "namespace": meta.get("namespace"),
        "obj_name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    fields.update(more)
    return {k: v for k, v in fields.items() if v is not None}
