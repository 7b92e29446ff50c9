"""What the tests' fake API clients share: KubeClient.get_or_none on top of their own `get`."""

from __future__ import annotations

from typing import Any

from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import ResourceRef


class GetOrNone:
    """Mixed into a fake client that has `get`: the object, or None where `get` raises NotFound."""

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Any:
        raise NotImplementedError

    async def get_or_none(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Any:
        try:
            return await self.get(resource, name, namespace)
        except NotFound:
            return None
