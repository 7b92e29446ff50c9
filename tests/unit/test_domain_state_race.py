"""The launcher's domain state when the domain is undefined between its lookup and the read (libvirt's test driver)."""

from __future__ import annotations

from typing import Any

import libvirt

from pykubevirt.launcher.domain_manager import DomainManager

XML = "<domain type='test'><name>vanishing</name><memory>8192</memory><os><type>hvm</type></os></domain>"


class UndefinedAfterLookup(DomainManager):
    """Found by name, then gone: what a migration's UNDEFINE_SOURCE does to a concurrent status read."""

    armed = False

    def _domain(self) -> Any:
        handle = super()._domain()
        if handle is not None and self.armed:
            # Only for the read under test: lifecycle events may read the state too.
            self.armed = False
            handle.destroy()
            handle.undefine()
        return handle


async def test_a_domain_undefined_after_its_lookup_reads_as_not_defined() -> None:
    manager = UndefinedAfterLookup("test:///default", "vanishing")
    await manager.connect()
    try:
        manager.connection.defineXML(XML).create()
        manager.armed = True
        state = await manager.state()
        assert (state.state, state.reason) == ("NoState", "Unknown")
        assert "vanishing" not in [d.name() for d in manager.connection.listAllDomains()]
    finally:
        try:
            manager.connection.lookupByName("vanishing").undefine()
        except libvirt.libvirtError:
            pass
