"""The instancetype and preference ControllerRevisions a snapshot carries, as KubeVirt's snapshot and restore keep them.

A VM started with an instancetype names the revision that holds it, owned by that VM. A snapshot keeps its own copy
(owned by the snapshot), and a restore makes one for its target (owned by the target), so a VM restored or cloned
from a snapshot still starts when the source VM, and the revisions it owned, are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import CONTROLLER_REVISIONS
from pykubevirt.controller.vmi_from_vm import controller_ref


class RevisionMissing(Exception):
    """A revision the VM names is not in the cache (yet, or any more)."""


def named_revisions(vm: Object) -> Iterator[dict[str, Any]]:
    """The VM's instancetype and preference matchers that name a revision (changed in place by the callers)."""
    spec = vm.get("spec") or {}
    for field in ("instancetype", "preference"):
        matcher = spec.get(field)
        if isinstance(matcher, dict) and matcher.get("revisionName"):
            yield matcher


def _copy(revision: Object, name: str, owner: dict[str, Any] | None) -> Object:
    meta: dict[str, Any] = {"name": name, "namespace": revision["metadata"].get("namespace")}
    if revision["metadata"].get("labels"):
        meta["labels"] = dict(revision["metadata"]["labels"])
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": revision.get("data"),
        "revision": revision.get("revision", 0),
    }


def _spec(revision: Object) -> Any:
    return (revision.get("data") or {}).get("spec")


def snapshot_owner(snapshot: Object) -> dict[str, Any]:
    return controller_ref(
        {"apiVersion": c.SNAPSHOT_API_VERSION, "kind": c.VM_SNAPSHOT_KIND, "metadata": snapshot["metadata"]}
    )


async def capture(client: KubeClient, revisions: Informer, vm: Object, snapshot: Object) -> None:
    """Copy each revision the recorded VM names into one the snapshot owns, and point the record at the copy.

    The copy's name is the revision's with the source VM's name swapped for the snapshot's (captureInstancetype...)."""
    namespace = snapshot["metadata"]["namespace"]
    source_name = str(((snapshot.get("spec") or {}).get("source") or {}).get("name", ""))
    for matcher in named_revisions(vm):
        name = str(matcher["revisionName"])
        existing = revisions.get(f"{namespace}/{name}")
        if existing is None:
            raise RevisionMissing(f"Unable to fetch ControllerRevision {namespace}/{name}")
        copy_name = name.replace(source_name, snapshot["metadata"]["name"], 1) if source_name else name
        try:
            await client.create(CONTROLLER_REVISIONS, _copy(existing, copy_name, snapshot_owner(snapshot)), namespace)
        except AlreadyExists:
            pass
        matcher["revisionName"] = copy_name


async def restore(
    client: KubeClient, revisions: Informer, vm: Object, snapshot_name: str, target: Object | None
) -> None:
    """Make the restored VM's own copy of each revision the snapshot holds, and point the VM at it.

    A target that exists may still have the revision under that name: kept when it holds the same spec, else
    replaced (revisions are immutable) by one the target owns at once."""
    namespace = vm["metadata"]["namespace"]
    for matcher in named_revisions(vm):
        name = str(matcher["revisionName"])
        held = revisions.get(f"{namespace}/{name}")
        if held is None:
            raise RevisionMissing(f"Unable to find ControllerRevision {namespace}/{name}")
        restored_name = name.replace(snapshot_name, vm["metadata"]["name"], 1)
        owner = None
        if target is not None:
            existing = revisions.get(f"{namespace}/{restored_name}")
            if existing is not None:
                if _spec(existing) == _spec(held):
                    matcher["revisionName"] = restored_name
                    continue
                try:
                    await client.delete(CONTROLLER_REVISIONS, restored_name, namespace)
                except NotFound:
                    pass
                owner = controller_ref(target)
        try:
            await client.create(CONTROLLER_REVISIONS, _copy(held, restored_name, owner), namespace)
        except AlreadyExists:
            pass
        matcher["revisionName"] = restored_name


async def claim(client: KubeClient, vm: Object) -> None:
    """The restored VM becomes the controller of the revisions it names (made before it existed)."""
    namespace = vm["metadata"]["namespace"]
    for matcher in named_revisions(vm):
        revision = await client.get(CONTROLLER_REVISIONS, str(matcher["revisionName"]), namespace)
        owners = revision["metadata"].get("ownerReferences") or []
        if any(o.get("controller") and o.get("uid") == vm["metadata"]["uid"] for o in owners):
            continue
        revision["metadata"]["ownerReferences"] = [controller_ref(vm)]
        await client.update(CONTROLLER_REVISIONS, revision)
