"""What a controller of many objects (a VMI replica set, a VM pool) needs of the objects it makes.

Which of its owners controls an object (the one in the cache, by UID), and expectations that see the object's
creation and deletion: a child marked for deletion counts as deleted, so a replacement need not wait for it to go.
"""

from __future__ import annotations

from pykubevirt.api.label_selectors import LabelSelector, SelectorError, label_selector_from_dict
from pykubevirt.client.api import Object
from pykubevirt.client.controller import controller_owner_key
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.informer import Informer, object_key

NAMESPACE_INDEX = "namespace"


def namespace_of_object(obj: Object) -> list[str]:
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


def any_controller(obj: Object) -> Object | None:
    """metav1.GetControllerOf: the owner reference marked controller, of any kind."""
    return next((ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("controller")), None)


def owner_selector(owner: Object) -> LabelSelector | None:
    """The owner's `spec.selector`; None when it is missing or invalid (nothing can be acted on then)."""
    selector = (owner.get("spec") or {}).get("selector")
    if not isinstance(selector, dict):
        return None
    try:
        return label_selector_from_dict(selector)
    except SelectorError:
        return None


class OwnedExpectations:
    """The owners of one kind in a cache, and the expectations of their children's creations and deletions."""

    def __init__(self, owners: Informer, kind: str) -> None:
        self.owners = owners
        self.kind = kind
        self.expectations = ControllerExpectations()

    def owner_key(self, obj: Object) -> str:
        """The key of the owner controlling `obj`, if it is the one in the cache (same UID); "" otherwise."""
        key = controller_owner_key(obj, self.kind)
        owner = self.owners.get(key) if key else None
        ref = any_controller(obj)
        if owner is None or ref is None or ref.get("uid") != owner["metadata"].get("uid"):
            return ""
        return key

    def on_add(self, obj: Object) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            self.on_delete(obj)
        elif key := self.owner_key(obj):
            self.expectations.creation_observed(key)

    def on_update(self, old: Object, new: Object) -> None:
        if new["metadata"].get("deletionTimestamp"):
            self.on_delete(new)

    def on_delete(self, obj: Object) -> None:
        if key := self.owner_key(obj):
            self.expectations.deletion_observed(key, object_key(obj))
