"""CDI's DataSource for the embedded cluster: resolving one (through at most one referenced DataSource), what its
`Ready` condition says, and the controller that keeps that condition (pkg/controller/datasource-controller.go).

A DataVolume's `sourceRef` names a DataSource; the DataVolume controller clones what it resolves to.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.data_source_target import data_source_target
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import Conflict, NotFound
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import DATA_SOURCES

log = logging.getLogger("pykubevirt.storage.datasource")

READY = "Ready"
# The labels a ready DataSource takes from its PVC and DataVolume (CDI's validLabelsMatch): instancetype defaults.
ALLOWED_LABEL = re.compile(r"^([\w.]+\.kubevirt.io|kubevirt.io)/[\w.-]+$")

Getter = Callable[[str, str], Object | None]


@dataclass(frozen=True, slots=True)
class SourceError(Exception):
    """Why a DataSource does not resolve: the condition's reason and message."""

    reason: str
    message: str


def resolve(data_source: Object, get_data_source: Getter) -> Object:
    """ResolveDataSourceChain: the DataSource itself, or the one its `source.dataSource` names."""
    meta = data_source["metadata"]
    ref = ((data_source.get("spec") or {}).get("source") or {}).get("dataSource")
    if not isinstance(ref, Mapping):
        return data_source
    namespace = str(ref.get("namespace") or meta["namespace"])
    if namespace != meta["namespace"]:
        raise SourceError("CrossNamespaceReference", "DataSource cannot reference a DataSource in another namespace")
    if ref.get("name") == meta["name"]:
        raise SourceError("SelfReference", "DataSource cannot self-reference")
    found = get_data_source(namespace, str(ref.get("name", "")))
    if found is None:
        raise SourceError("NotFound", f'datasources.cdi.kubevirt.io "{ref.get("name", "")}" not found')
    if ((found.get("spec") or {}).get("source") or {}).get("dataSource") is not None:
        raise SourceError("MaxReferenceDepthReached", "DataSource reference chain exceeds maximum depth of 1")
    return found


def clone_source(data_source: Object, get_data_source: Getter) -> dict[str, Any] | None:
    """The DataVolume source a `sourceRef` to this DataSource stands for (`pvc` or `snapshot`), or None while it has
    none (CDI then does nothing with the DataVolume until the DataSource changes)."""
    try:
        resolved = resolve(data_source, get_data_source)
    except SourceError:
        return None
    return data_source_target(resolved)  # `resolved` names no DataSource: its own source


@dataclass(frozen=True, slots=True)
class Observed:
    """What the controller would write: the Ready condition, the resolved source, the labels to take on."""

    status: str
    reason: str
    message: str
    source: dict[str, Any]
    labels: dict[str, str]


def observe(data_source: Object, get_data_source: Getter, get_claim: Getter, get_data_volume: Getter) -> Observed:
    """Ready once the resolved source PVC exists and its DataVolume, if any, succeeded (DataSourceReconciler.update)."""
    try:
        resolved = resolve(data_source, get_data_source)
    except SourceError as error:
        return Observed("False", error.reason, error.message, {}, {})
    source = (resolved.get("spec") or {}).get("source") or {}
    pvc, snapshot = source.get("pvc"), source.get("snapshot")
    if isinstance(pvc, Mapping):
        namespace = str(pvc.get("namespace") or resolved["metadata"]["namespace"])
        name = str(pvc.get("name", ""))
        claim, data_volume = get_claim(namespace, name), get_data_volume(namespace, name)
        if data_volume is None and claim is None:
            return Observed("False", "NotFound", "PVC not found", {}, {})
        phase = str(((data_volume or {}).get("status") or {}).get("phase") or "")
        if data_volume is not None and phase != "Succeeded":
            return Observed("False", phase, f"Import DataVolume phase {phase}", {}, {})
        labels = {
            key: str(value)
            for owner in (data_volume, claim)
            for key, value in (((owner or {}).get("metadata") or {}).get("labels") or {}).items()
            if ALLOWED_LABEL.match(key)
        }
        return Observed("True", READY, "DataSource is ready to be consumed", copy_json(dict(source)), labels)
    if isinstance(snapshot, Mapping):
        # The embedded cluster serves no VolumeSnapshots.
        return Observed("False", "NotFound", "Snapshot not found", {}, {})
    return Observed("False", "NoSource", "No source PVC set", {}, {})


def _condition(old: Mapping[str, Any] | None, observed: Observed) -> dict[str, Any]:
    """The Ready condition; its times move only when it changes, so an unchanged DataSource is not rewritten."""
    wanted = {"type": READY, "status": observed.status, "reason": observed.reason, "message": observed.message}
    if old is not None and all(old.get(key) == value for key, value in wanted.items()):
        return dict(old)
    now = now_rfc3339()
    return {**wanted, "lastTransitionTime": now, "lastHeartbeatTime": now}


class DataSourceController:
    """Keeps each DataSource's Ready condition, resolved source and instancetype labels (keys `namespace/name`)."""

    def __init__(self, client: KubeClient, *, data_sources: Informer, claims: Informer, data_volumes: Informer) -> None:
        self.client = client
        self.data_sources = data_sources
        self.claims = claims
        self.data_volumes = data_volumes

    def get_data_source(self, namespace: str, name: str) -> Object | None:
        return self.data_sources.get(f"{namespace}/{name}")

    async def reconcile(self, key: str) -> Result | None:
        data_source = self.data_sources.get(key)
        if data_source is None or data_source["metadata"].get("deletionTimestamp"):
            return None
        observed = observe(
            data_source,
            self.get_data_source,
            lambda ns, name: self.claims.get(f"{ns}/{name}"),
            lambda ns, name: self.data_volumes.get(f"{ns}/{name}"),
        )
        status = data_source.get("status") or {}
        old = next((c for c in status.get("conditions") or [] if c.get("type") == READY), None)
        wanted_status = {**status, "conditions": [_condition(old, observed)], "source": observed.source}
        labels = data_source["metadata"].get("labels") or {}
        wanted_labels = {**labels, **observed.labels}
        if wanted_status == status and wanted_labels == labels:
            return None
        body = copy_json(data_source)
        body["status"] = wanted_status
        body["metadata"]["labels"] = wanted_labels
        if old is None or old.get("status") != observed.status:
            log.info("DataSource %s: Ready %s (%s)", key, observed.status, observed.reason)
        try:
            await self.client.update(DATA_SOURCES, body)
        except (NotFound, Conflict):
            return None  # a newer DataSource is on its way through the informer
        return None

    def naming_claim(self, obj: Object) -> list[str]:
        """The DataSources a claim or DataVolume event concerns: those whose `pvc` (directly, or through the one
        DataSource they reference) is that object. Other claims and DataVolumes, the busy ones, enqueue nothing."""
        meta = obj.get("metadata") or {}
        target = (meta.get("namespace"), meta.get("name"))
        direct = {key for key, ds in self._sources() if _pvc_key(ds) == target}
        return sorted(direct | {key for key, ds in self._sources() if _reference_key(ds) in direct})

    def referencing(self, obj: Object) -> list[str]:
        """The DataSources that reference this one with `source.dataSource`: their resolution follows it."""
        return [key for key, ds in self._sources() if _reference_key(ds) == object_key(obj)]

    def _sources(self) -> list[tuple[str, Object]]:
        return [(object_key(ds), ds) for ds in self.data_sources.items()]


def _pvc_key(data_source: Object) -> tuple[Any, Any] | None:
    pvc = ((data_source.get("spec") or {}).get("source") or {}).get("pvc")
    if not isinstance(pvc, Mapping):
        return None
    return (pvc.get("namespace") or data_source["metadata"].get("namespace"), pvc.get("name"))


def _reference_key(data_source: Object) -> str | None:
    ref = ((data_source.get("spec") or {}).get("source") or {}).get("dataSource")
    if not isinstance(ref, Mapping):
        return None
    return f"{ref.get('namespace') or data_source['metadata'].get('namespace')}/{ref.get('name')}"
