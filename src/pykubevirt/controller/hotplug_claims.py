"""A hotplugged claim of a WaitForFirstConsumer class is provisioned on the VMI's node.

KubeVirt hotplugs through an attachment pod on the VMI's node, and the scheduler, placing that pod, picks the
node for the claims it mounts (the `volume.kubernetes.io/selected-node` annotation the provisioner waits for). There
is no attachment pod here: virt-controller names the VMI's node on such a claim itself, so a fresh claim of the
default `local` class can be hotplugged (or take a memory dump) as it can on KubeVirt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import volume_binding as vb
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS
from pykubevirt.controller.volume_status import claim_name, is_hotplug_volume
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.hotplug_claims")


def claims_to_place(
    vmi: Mapping[str, Any], claims: Mapping[str, Object], classes: list[Object]
) -> list[tuple[str, str]]:
    """(claim, node) for each unbound hotplugged claim of a WaitForFirstConsumer class that names no node yet."""
    node = str((vmi.get("status") or {}).get("nodeName") or "")
    if not node or (vmi.get("metadata") or {}).get("deletionTimestamp"):
        return []
    by_name = {str(sc["metadata"]["name"]): sc for sc in classes}
    default = vb.default_class(classes)
    found = []
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        if not is_hotplug_volume(volume):
            continue
        pvc = claims.get(claim_name(volume))
        if pvc is None or (pvc.get("spec") or {}).get("volumeName"):
            continue
        if ((pvc.get("metadata") or {}).get("annotations") or {}).get(vb.SELECTED_NODE):
            continue
        class_name = (pvc.get("spec") or {}).get("storageClassName")
        storage_class = by_name.get(class_name) if class_name else default
        if storage_class is not None and storage_class.get("volumeBindingMode") == vb.WAIT_FOR_FIRST_CONSUMER:
            found.append((str(pvc["metadata"]["name"]), node))
    return found


class HotplugClaims:
    """Names the VMI's node on the hotplugged claims waiting for their first consumer."""

    def __init__(self, client: KubeClient, claims: Informer, classes: Informer | None) -> None:
        self.client = client
        self.claims = claims
        self.classes = classes

    async def place(self, vmi: Object) -> None:
        namespace = vmi["metadata"]["namespace"]
        names = {claim_name(v) for v in (vmi.get("spec") or {}).get("volumes") or [] if is_hotplug_volume(v)}
        claims = {name: pvc for name in names if (pvc := self.claims.get(f"{namespace}/{name}")) is not None}
        if not claims:
            return
        classes = self.classes.items() if self.classes is not None else []
        for claim, node in claims_to_place(vmi, claims, list(classes)):
            patch = {"metadata": {"annotations": {vb.SELECTED_NODE: node}}}
            try:
                await self.client.patch(PERSISTENT_VOLUME_CLAIMS, claim, patch, namespace)
            except ApiError as exc:
                log.warning("cannot select node %s for claim %s: %s", node, claim, exc.message)
                continue
            log.info("hotplugged claim placed on the VMI's node", extra=object_fields(vmi, claim=claim, node=node))
