"""Who makes a request and the options that shape its write, and what admission plugins are handed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubevirt.apiserver import managed_fields
from pykubevirt.apiserver.resources import Resource

STRICT = "Strict"
WARN = "Warn"
IGNORE = "Ignore"


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ()


# The server's own identity, for the writes it makes itself (bootstrap, built-in CRDs).
SYSTEM_USER = UserInfo("system:apiserver", ("system:masters",))


@dataclass(slots=True)
class RequestContext:
    """Per-request options that shape a write, and the warnings it collects for the `Warning` header."""

    user: UserInfo = SYSTEM_USER
    dry_run: bool = False
    field_validation: str = WARN
    field_manager: str = ""
    # The program name of the user agent names the manager of writes without a fieldManager (in-process: the server).
    user_agent: str = "kube-apiserver"
    force: bool | None = None
    # The subresource a write goes through when it is not the object's own update (pods/binding).
    subresource: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def manager(self) -> str:
        return managed_fields.manager_name(self.field_manager, self.user_agent)


class AdmissionPlugin(Protocol):
    """Mutating and validating admission for some resources (KubeVirt's webhooks, in-process)."""

    def handles(self, resource: Resource) -> bool: ...

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]: ...

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]: ...
