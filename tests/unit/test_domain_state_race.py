"""The launcher's domain state when the domain is undefined between its lookup and the read (libvirt's test driver)."""

from __future__ import annotations

import asyncio
import gc
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


async def test_an_event_libvirt_queued_before_the_close_is_dropped_after_it() -> None:
    """A launcher may close its connection while libvirt's later events for its guest are still queued on the loop:
    they must not fail in a task nobody awaits."""
    failures: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: failures.append(context))
    manager = DomainManager("test:///default", "closing")
    await manager.connect()
    manager.connection.defineXML(XML.replace("vanishing", "closing")).create()
    heard: list[str] = []
    manager.add_listener(lambda state, event: heard.append(event))
    # Two lifecycle events as libvirtaio hands them over: one read in a task the close overtakes, one run after it.
    manager._on_event(libvirt.VIR_DOMAIN_EVENT_STOPPED, 0)
    await manager.close()
    manager._on_event(libvirt.VIR_DOMAIN_EVENT_STOPPED, 0)
    await asyncio.sleep(0.1)
    gc.collect()  # a failed task nobody awaited is reported when it is collected
    await asyncio.sleep(0)
    assert failures == []
    assert heard == []
