"""virt-controller's part of backend storage: the claim a VMI with persistent EFI or TPM state needs before its
launcher pod, created once per VM and found again on every start (handleBackendStorage, IsPVCReady)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pykubevirt.api import backend_storage as bs
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.backend_storage")

# Index of the claims informer: `<namespace>/<vmi>` of a claim's persistent-state-for label.
CLAIM_OWNER_INDEX = "persistent-state-for"
NO_BACKEND_CLAIM = "no backend PVC when there should be one"


def claim_owner_keys(pvc: Object) -> list[str]:
    """The VMI key a backend-storage claim is for (its label), or none."""
    meta = pvc.get("metadata") or {}
    name = (meta.get("labels") or {}).get(bs.PVC_PREFIX)
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


class NoBackendClaim(LookupError):
    """A VM needs backend storage and has no claim yet."""


def index_claim_owners(claims: Informer) -> None:
    """Index a claims informer by the VM or VMI each backend-storage claim is for."""
    claims.add_indexer(CLAIM_OWNER_INDEX, claim_owner_keys)


def labelled_claims(claims: Informer, namespace: str, name: str) -> list[Object]:
    """The cached claims labelled `persistent-state-for` the VM or VMI `name` (they share their name)."""
    return claims.by_index(CLAIM_OWNER_INDEX, f"{namespace}/{name}")


def vm_claim(claims: Informer, vm: Object) -> Object | None:
    """The cached backend-storage claim of a VM (getBackendPVCName): the newest live one labelled for it."""
    meta = vm["metadata"]
    return bs.newest_live_claim(labelled_claims(claims, str(meta.get("namespace")), str(meta.get("name"))))


def vm_backend_volume(claims: Informer, vm: Object) -> dict[str, Any] | None:
    """The VM's backend-storage claim as one of its volumes, None when it needs none.

    Raises NoBackendClaim when it needs one that does not exist yet (upstream's ErrNoBackendPVC): a VM with
    persistent state that never started.
    """
    if not bs.vm_needs(vm):
        return None
    pvc = vm_claim(claims, vm)
    if pvc is None:
        raise NoBackendClaim(NO_BACKEND_CLAIM)
    return bs.vm_volume(str(vm["metadata"]["name"]), str(pvc["metadata"]["name"]))


class BackendStorage:
    """Creates, finds and deletes VMIs' backend-storage claims through the controller's informers."""

    def __init__(self, client: KubeClient, claims: Informer, classes: Informer | None) -> None:
        self.client = client
        self.claims = claims
        self.classes = classes
        self.expectations = ControllerExpectations()
        index_claim_owners(claims)

    def on_claim_add(self, pvc: Object) -> None:
        for key in claim_owner_keys(pvc):
            self.expectations.creation_observed(key)

    def claim_of(self, vmi: Object) -> Object | None:
        meta = vmi["metadata"]
        labelled = labelled_claims(self.claims, str(meta.get("namespace")), str(meta.get("name")))
        legacy = self.claims.get(f"{meta.get('namespace')}/{bs.PVC_PREFIX}-{meta.get('name')}")
        found = bs.claim_for(vmi, [*labelled, *([legacy] if legacy is not None else [])])
        return dict(found) if found is not None else None

    def _classes(self) -> dict[str, Object]:
        items = self.classes.items() if self.classes is not None else []
        return {str(sc["metadata"]["name"]): sc for sc in items}

    async def ensure(self, vmi: Object, key: str, configured_class: str) -> str | None:
        """The name of the VMI's claim once the launcher pod may use it; None while it is being created or bound.

        Raises SyncError with KubeVirt's reason when the claim cannot be made or used. A VMI that no longer needs
        backend storage has its claim deleted, as upstream does.
        """
        pvc = self.claim_of(vmi)
        if not bs.is_needed(vmi):
            if pvc is not None:
                try:
                    with contextlib.suppress(NotFound):
                        await self.client.delete(
                            PERSISTENT_VOLUME_CLAIMS, pvc["metadata"]["name"], pvc["metadata"]["namespace"]
                        )
                except ApiError as exc:
                    raise SyncError(exc.message, "Failed deleting backend storage") from exc
            return ""
        if not self.expectations.satisfied(key):
            return None  # a claim this controller created is not in the cache yet; its add event brings the VMI back
        if pvc is None:
            pvc = await self._create(vmi, key, configured_class)
        try:
            ready = bs.is_ready(pvc, self._classes())
        except bs.BackendStorageError as exc:
            raise SyncError(str(exc), bs.FAILED_PROBE_REASON) from exc
        if not ready:
            raise SyncError("PVC pending", bs.NOT_READY_REASON)
        return str(pvc["metadata"]["name"])

    async def _create(self, vmi: Object, key: str, configured_class: str) -> Object:
        classes = self.classes.items() if self.classes is not None else []
        try:
            class_name = bs.storage_class(configured_class, classes)
        except bs.BackendStorageError as exc:
            raise SyncError(str(exc), bs.FAILED_CREATE_REASON) from exc
        claim = bs.render_claim(vmi, class_name, bs.access_mode(configured_class))
        try:
            with self.expectations.creating(key):
                created = await self.client.create(PERSISTENT_VOLUME_CLAIMS, claim, vmi["metadata"]["namespace"])
        except ApiError as exc:
            raise SyncError(exc.message, bs.FAILED_CREATE_REASON) from exc
        log.info("created backend-storage claim %s", created["metadata"]["name"], extra=object_fields(vmi))
        return created
