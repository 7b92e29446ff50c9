"""The current RBAC policy, read from the store once per change to a role or binding."""

from __future__ import annotations

from pykubevirt.apiserver.authorization.rbac import Policy
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import Event

COLLECTIONS = {
    "cluster_roles": "rbac.authorization.k8s.io/clusterroles",
    "roles": "rbac.authorization.k8s.io/roles",
    "cluster_role_bindings": "rbac.authorization.k8s.io/clusterrolebindings",
    "role_bindings": "rbac.authorization.k8s.io/rolebindings",
}
_WATCHED = frozenset(COLLECTIONS.values())


class StorePolicy:
    """Callable giving (generation, Policy); the generation moves with every committed RBAC change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.generation = 0
        self._policy: Policy | None = None
        store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.collection in _WATCHED:
            self.generation += 1
            self._policy = None

    def __call__(self) -> tuple[int, Policy]:
        if self._policy is None:
            objects = {
                field: [r.value for r in self.store.records(collection)] for field, collection in COLLECTIONS.items()
            }
            self._policy = Policy.from_objects(**objects)
        return self.generation, self._policy
