"""kube-apiserver's Service strategy and allocators: defaults, validation, a ClusterIP from the service CIDR and node
ports, kept on updates that leave them out (api.service_validation holds the rules).

What is taken is read from the store's current state: admission and the store's write run in one turn of the
event loop, so two concurrent creates never get the same address, and a deleted Service's address is free at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.api import service_validation as sv
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext
    from pykubevirt.apiserver.store import Store

SERVICES = "core/services"


class ServiceAdmission:
    """The Service strategy and its IP and port allocators over one service CIDR."""

    def __init__(self, store: Store, service_cidr: str = sv.DEFAULT_SERVICE_CIDR) -> None:
        self.store = store
        self.service_cidr = service_cidr

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and not resource.group and resource.kind == "Service"

    def _stored_specs(self) -> list[dict[str, Any]]:
        return [record.value.get("spec") or {} for record in self.store.records(SERVICES)]

    def _taken_ips(self) -> set[str]:
        return {str(ip) for spec in self._stored_specs() for ip in spec.get("clusterIPs") or []}

    def _taken_ports(self) -> set[int]:
        return {int(p["nodePort"]) for s in self._stored_specs() for p in sv.ports_of(s) if p.get("nodePort")}

    def mutate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> dict[str, Any]:
        sv.default_service(obj)
        if old is not None:
            sv.keep_allocated(obj, old)
        name = str((obj.get("metadata") or {}).get("name") or "")
        # kube validates before it allocates: a malformed Service never takes an address.
        found = sv.validate_service_update(obj, old) if old is not None else sv.validate_service(obj)
        if found:
            raise errors.invalid(resource.kind, resource.group, name, [cause.to_dict() for cause in found])
        spec = obj["spec"]
        old_spec = (old or {}).get("spec") or {}
        try:
            # A new Service gets its address (the one it asks for, when free); an update only when it stops being
            # an ExternalName: otherwise the address is kept (validated as immutable).
            if old is None or sv.service_type(old_spec) == "ExternalName":
                sv.allocate_cluster_ip(spec, self.service_cidr, self._taken_ips())
            # The Service's own ports stay its own on an update.
            own = {int(p["nodePort"]) for p in sv.ports_of(old_spec) if p.get("nodePort")}
            sv.allocate_node_ports(spec, self._taken_ports() - own)
        except sv.AllocationError as exc:
            if exc.cause is None:
                raise errors.internal(str(exc)) from exc
            raise errors.invalid(resource.kind, resource.group, name, [exc.cause.to_dict()]) from exc
        return obj

    def validate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> list[str]:
        return []
