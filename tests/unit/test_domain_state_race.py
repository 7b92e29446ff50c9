"""The launcher's domain state when the domain is undefined between its lookup and the read (libvirt's test driver)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import libvirt

from pykubevirt.launcher.domain_manager import DomainManager

XML = "<domain type='test'><name>vanishing</name><memory>8192</memory><os><type>hvm</type></os></domain>"


# Set only in the test's own task: asyncio.to_thread carries it into the read under test, and not into the reads
# the domain's lifecycle events start meanwhile, which a flag on the manager let take the undefine (and then the
# read under test could see the domain destroyed but not yet undefined).
UNDER_TEST: ContextVar[bool] = ContextVar("UNDER_TEST", default=False)


class UndefinedAfterLookup(DomainManager):
    """Found by name, then gone: what a migration's UNDEFINE_SOURCE does to a concurrent status read."""

    def _domain(self) -> Any:
        handle = super()._domain()
        if handle is not None and UNDER_TEST.get():
            handle.destroy()
            handle.undefine()
        return handle


async def test_a_domain_undefined_after_its_lookup_reads_as_not_defined() -> None:
    manager = UndefinedAfterLookup("test:///default", "vanishing")
    await manager.connect()
    try:
        manager.connection.defineXML(XML).create()
        token = UNDER_TEST.set(True)
        try:
            state = await manager.state()
        finally:
            UNDER_TEST.reset(token)
        assert (state.state, state.reason) == ("NoState", "Unknown")
        assert "vanishing" not in [d.name() for d in manager.connection.listAllDomains()]
    finally:
        try:
            manager.connection.lookupByName("vanishing").undefine()
        except libvirt.libvirtError:
            pass
