"""The VM's start ControllerRevision: the spec a running VMI was started from, for generations and RestartRequired."""

from __future__ import annotations

import json
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import CONTROLLER_REVISIONS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller.vm_hotplug import without_live_updatable
from pykubevirt.controller.vmi_from_vm import controller_ref
from pykubevirt.controller.volume_status import without_hotplug_volumes

OWNER_INDEX = "owner-uid"


def revision_prefix(vm_uid: str) -> str:
    return f"revision-start-vm-{vm_uid}"


def revision_name(vm_uid: str, generation: int) -> str:
    return f"{revision_prefix(vm_uid)}-{generation}"


def revision_data_spec(revision: Object) -> dict[str, Any]:
    """The `data.spec` a ControllerRevision stores (its data may arrive as a JSON string)."""
    data = revision.get("data") or {}
    if isinstance(data, str):
        data = json.loads(data)
    return dict(data.get("spec") or {})


def revision_spec(vm: Object) -> dict[str, Any]:
    """The VM spec as recorded at start, with the instancetype/preference revision names filled in."""
    spec = copy_json(vm.get("spec") or {})
    status = vm.get("status") or {}
    for matcher, ref in (("instancetype", "instancetypeRef"), ("preference", "preferenceRef")):
        revision = ((status.get(ref) or {}).get("controllerRevisionRef") or {}).get("name")
        if spec.get(matcher) is not None and revision:
            spec[matcher]["revisionName"] = revision
    return spec


class StartRevisions:
    """Creates and reads the start revisions through the API and the ControllerRevision cache."""

    def __init__(self, client: KubeClient, revisions: Informer) -> None:
        self.client = client
        self.revisions = revisions

    def _for_vm(self, vm: Object) -> list[Object]:
        prefix = revision_prefix(vm["metadata"]["uid"])
        return [
            r
            for r in self.revisions.by_index(OWNER_INDEX, vm["metadata"]["uid"])
            if r["metadata"]["name"].startswith(prefix)
        ]

    async def ensure(self, vm: Object) -> str:
        """The revision for the VM's current generation, created if needed; older ones are deleted."""
        meta = vm["metadata"]
        generation = int(meta.get("generation", 1))
        name = revision_name(meta["uid"], generation)
        exists = False
        for revision in self._for_vm(vm):
            if int(revision.get("revision", 0)) == generation:
                exists = True
                continue
            try:
                await self.client.delete(CONTROLLER_REVISIONS, revision["metadata"]["name"], meta["namespace"])
            except NotFound:
                pass
        if exists:
            return name
        body = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": [controller_ref(vm)]},
            "data": {"spec": revision_spec(vm)},
            "revision": generation,
        }
        try:
            await self.client.create(CONTROLLER_REVISIONS, body, meta["namespace"])
        except AlreadyExists:
            pass
        return name

    def last_spec(self, vm: Object) -> dict[str, Any] | None:
        """The spec of the newest start revision in the cache."""
        newest: Object | None = None
        for revision in self._for_vm(vm):
            if newest is None or int(revision.get("revision", 0)) > int(newest.get("revision", 0)):
                newest = revision
        if newest is None:
            return None
        return revision_data_spec(newest)

    def restart_required(self, vm: Object, vmi: Object | None, *, live_update: bool = False) -> bool:
        """True when the template changed since the running VMI started in a field that cannot change live.

        With the LiveUpdate rollout strategy, CPU sockets, guest memory and the scheduling fields can."""
        if vmi is None or vmi["metadata"].get("deletionTimestamp"):
            return False
        last = self.last_spec(vm)
        if last is None:
            return False
        before = (last.get("template") or {}).get("spec") or {}
        now = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        # A firmware UUID persisted to the VM after start is the one the VMI already runs with.
        vmi_uuid = (((vmi.get("spec") or {}).get("domain") or {}).get("firmware") or {}).get("uuid")
        now_uuid = ((now.get("domain") or {}).get("firmware") or {}).get("uuid")
        if live_update:
            before = without_live_updatable(before, now)
        if vmi_uuid and vmi_uuid == now_uuid:
            # Copied only here: this runs on every reconcile and the specs are the cache's.
            before = copy_json(before)
            before.setdefault("domain", {}).setdefault("firmware", {})["uuid"] = now_uuid
        return without_hotplug_volumes(before) != without_hotplug_volumes(now)

    async def bump_generation_annotation(self, vm: Object, vmi: Object) -> Object:
        """Point the VMI's vm-generation at the VM's generation when only non-template fields changed."""
        generation = str(vm["metadata"].get("generation", 1))
        annotations = vmi["metadata"].get("annotations") or {}
        if annotations.get(c.VM_GENERATION_ANNOTATION) == generation:
            return vmi
        revision_name_ = (vmi.get("status") or {}).get("virtualMachineRevisionName")
        revision = (
            self.revisions.get_by_name(vmi["metadata"]["namespace"], str(revision_name_)) if revision_name_ else None
        )
        if revision is None:
            return vmi
        if revision_data_spec(revision).get("template") != (vm.get("spec") or {}).get("template"):
            return vmi
        patch = {"metadata": {"annotations": {c.VM_GENERATION_ANNOTATION: generation}}}
        try:
            updated: Object = await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], patch, vmi["metadata"]["namespace"]
            )
        except NotFound:
            return vmi
        return updated
