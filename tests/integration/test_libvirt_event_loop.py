"""libvirt's events reach the launcher's asyncio loop at once when a libvirt thread queued them, not when something
else next wakes the loop.

Each case runs in a process of its own: libvirt takes one event implementation a process, for good.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.paths import REPO

# On an idle loop, a thread that is not the loop's changes the test driver's domain, as a QEMU driver worker does
# when QEMU exits or the guest panics; the script prints how long the lifecycle event took to reach the loop.
SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, threading, time
    import libvirt
    from pykubevirt.launcher.libvirt_event_loop import ThreadSafeEventImpl

    async def main():
        loop = asyncio.get_running_loop()
        ThreadSafeEventImpl(loop).register()
        conn = await asyncio.to_thread(libvirt.open, "test:///default")
        seen = []
        arrived = asyncio.Event()

        def lifecycle(conn, domain, event, detail, opaque):
            seen.append(event)
            if len(seen) == 2:
                arrived.set()

        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle, None)
        domain = await asyncio.to_thread(conn.lookupByName, "test")
        await asyncio.sleep(0.2)
        started = time.monotonic()

        def change():
            domain.suspend()
            domain.resume()

        threading.Thread(target=change).start()
        try:
            await asyncio.wait_for(arrived.wait(), 5)
        except TimeoutError:
            pass
        print(json.dumps({"seconds": time.monotonic() - started, "events": seen}))
        conn.close()

    asyncio.run(main())
    """
)


def test_an_event_a_libvirt_thread_queued_wakes_the_idle_loop() -> None:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Both events, in libvirt's order; libvirtaio's own implementation left them queued until the loop's next
    # wake-up (the wait's 5 s timeout here).
    assert result["events"] == [3, 4], result  # VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_RESUMED
    assert result["seconds"] < 1.0, result
