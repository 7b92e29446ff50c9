"""virt-handler's VMI sync: keep each VMI on this node and its domain in step.

Upstream: pkg/virt-handler/vm.go: sync, processVmShutdown, processVmDelete, processVmUpdate.

Priority is KubeVirt's: shut down (deleted or terminating VMI, or a launcher told to stop) > delete (final VMI or
stopped domain) > update (start the domain, report its state). What the handler has not seen since it started is
never a reason to stop a guest: an empty cache only means "ask the launcher".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import objects, pod_layout
from pykubevirt.api.kubevirt.multus_status import keep_controller_part
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import ApiError, Invalid, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCES
from pykubevirt.handler import memory_dump
from pykubevirt.handler.certificates import TLSSource
from pykubevirt.handler.guest_agent_status import agent_status
from pykubevirt.handler.guest_panic_report import GuestPanicReport
from pykubevirt.handler.hotplug import after_sync, claim_mounts, mark_detaching, wants_launcher
from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient, LauncherUnavailable, ProtocolMismatch
from pykubevirt.handler.live_migratable import migratability_changes
from pykubevirt.handler.migration_source import OutgoingMigrations, leaving_by_migration
from pykubevirt.handler.migration_target import migration_state
from pykubevirt.handler.phase import Observed, observed_domain, phase_for
from pykubevirt.handler.records import NodeRecords
from pykubevirt.handler.resource_hotplug import memory_changes
from pykubevirt.handler.shutdown import grace_period, shutdown_step
from pykubevirt.handler.status_update import status_changes, sync_failed_conditions
from pykubevirt.handler.sync_action import Action, next_action
from pykubevirt.launcher.protocol import STOPPED_STATES, Status, domain_name
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.handler")

INITIALIZE_TIMEOUT_SECONDS = 180.0
# How long a migration source's domain may take to shut off by itself once the target took its VMI over (libvirt's
# confirm step takes well under a second).
MIGRATED_SOURCE_WAIT_SECONDS = 15.0
# How long a reconcile that found the launcher gone waits for the watch to read what the launcher wrote last (the
# watch ends at once at a dead launcher's end of stream; one hung or still shutting down makes it wait this long).
WATCH_DRAIN_SECONDS = 1.0
# How long, from the first failed request, a launcher whose watch is still open may go unjudged: a dead launcher's
# watch ends within it even on a loaded node, a hung one's does not.
UNREAD_WATCH_GRACE_SECONDS = 10.0
# How many times a watch is opened in a row while the launcher answers and its domain has not stopped.
WATCH_ATTEMPTS = 3


def claim_capacities(vmi: Object) -> tuple[tuple[str, str], ...]:
    """Each claim volume's capacity as the VMI's volumeStatus tells it."""
    return tuple(
        sorted(
            (str(s.get("name")), str(((s.get("persistentVolumeClaimInfo") or {}).get("capacity") or {}).get("storage")))
            for s in (vmi.get("status") or {}).get("volumeStatus") or []
            if s.get("persistentVolumeClaimInfo")
        )
    )


def active_pod_uid(vmi: Object, node: str, pods_dir: Path | None = None) -> str:
    """The launcher pod of the VMI on this node (from status.activePods).

    A VMI that migrated away and back has two pods here; the one whose launcher socket is there is the live one
    (KubeVirt's FindSocketOnHost), since a launcher that exited took its runtime directory with it.
    """
    candidates = [
        str(pod_uid)
        for pod_uid, pod_node in ((vmi.get("status") or {}).get("activePods") or {}).items()
        if pod_node == node
    ]
    if pods_dir is not None and len(candidates) > 1:
        live = [uid for uid in candidates if os.path.exists(pod_layout.launcher_socket(str(pods_dir), uid))]
        candidates = live or candidates
    return candidates[-1] if candidates else ""


class VMIReconciler:
    """Reconciles VMI keys for one node."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node: str,
        pods_dir: Path,
        vmis: Informer,
        recorder: EventRecorder,
        records: NodeRecords,
        enqueue: Callable[[str, float], None],
        clock: Callable[[], float] = time.time,
        migration_tls: TLSSource = None,
    ) -> None:
        self.client = client
        self.node = node
        self.pods_dir = pods_dir
        self.vmis = vmis
        self.recorder = recorder
        self.records = records
        self.enqueue = enqueue
        self.clock = clock
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._first_seen: dict[str, float] = {}
        # vmi uid → the last status its launcher's watch delivered. A launcher exits soon after its domain stopped;
        # like KubeVirt's domain cache, this keeps the stopped domain for the reconcile that comes after the exit.
        self._last_seen: dict[str, Status] = {}
        # The claim capacities each VMI's launcher last synced with (vmi uid → sizes); a change means a claim grew.
        self._synced_sizes: dict[str, tuple[tuple[str, str], ...]] = {}
        self.outgoing = OutgoingMigrations(client, recorder, migration_tls)
        # key → when a migration source's VMI was first seen gone from this node (see `_ends_by_migration`).
        self._migrated_away: dict[str, float] = {}
        self.panics = GuestPanicReport(recorder)

    # ------------------------------------------------------------------------------------------------ launchers

    def launcher(self, pod_uid: str) -> LauncherClient:
        return LauncherClient.of_pod(self.pods_dir, pod_uid)

    async def _observe(self, vmi: Object, pod_uid: str) -> tuple[Observed, Status | None]:
        """The domain as the launcher reports it; launcher trouble shows as initializing or unresponsive."""
        vmi_uid = vmi["metadata"]["uid"]
        try:
            status = await self.launcher(pod_uid).status()
        except LauncherUnavailable as exc:
            drained = await self._drain_watch(vmi_uid)
            last = self._last_seen.get(vmi_uid)
            if last is not None and last["domain"]["state"] in STOPPED_STATES:
                return replace(observed_domain(last), launcher_exited=True), last
            pod_dir = self.pods_dir / pod_uid
            waited = self.clock() - self._first_seen.setdefault(vmi_uid, self.clock())
            if exc.initializing and pod_dir.exists() and waited <= INITIALIZE_TIMEOUT_SECONDS:
                return Observed(launcher_initializing=True), None
            if not drained and waited <= UNREAD_WATCH_GRACE_SECONDS:
                # The watch has not reached the launcher's end yet (a loaded node): what it has still to read may be
                # the guest's shutdown, so the launcher is not judged before it has been read.
                return Observed(launcher_initializing=True), None
            log.warning(
                "the launcher does not answer (%s); the last state it reported: %s",
                exc,
                last["domain"]["state"] if last is not None else "none",
                extra=object_fields(vmi),
            )
            return Observed(launcher_unresponsive=True), None
        self._first_seen.pop(vmi_uid, None)
        return observed_domain(status), status

    async def _drain_watch(self, vmi_uid: str) -> bool:
        """A launcher that has just gone may have left its last statuses (the guest shut down) unread on the watch's
        socket: let the watch read them up to its end before the launcher counts as unresponsive. False when the
        watch is still reading after WATCH_DRAIN_SECONDS."""
        task = self._watches.get(vmi_uid)
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), WATCH_DRAIN_SECONDS)
        return task is None or task.done()

    def _watch(self, key: str, vmi: Object, pod_uid: str) -> None:
        """Hear about domain changes as they happen (a guest powering itself off), not on the next resync."""
        vmi_uid = vmi["metadata"]["uid"]
        task = self._watches.get(vmi_uid)
        if task is not None and not task.done():
            return

        async def follow() -> None:
            for attempt in range(WATCH_ATTEMPTS):
                ended = "the launcher closed it"
                try:
                    async for status in self.launcher(pod_uid).watch():
                        self._last_seen[vmi_uid] = status
                        # Here too, not only in a reconcile: the VMI may be failed and gone before one reads the panic.
                        self.panics.observe(vmi, status)
                        self.enqueue(key, 0)
                except LauncherUnavailable:
                    break  # gone: what it said last is all there is
                except (ProtocolMismatch, OSError, ValueError) as exc:
                    ended = str(exc) or type(exc).__name__
                last = self._last_seen.get(vmi_uid)
                if (last is not None and last["domain"]["state"] in STOPPED_STATES) or attempt + 1 == WATCH_ATTEMPTS:
                    break
                # Watched again at once, not on the next reconcile: a launcher about to exit still answers now with
                # the state it is in, which a later look would not find.
                log.info(
                    "the launcher's watch ended (%s) before the domain stopped; watching again",
                    ended,
                    extra=object_fields(vmi),
                )
            self.enqueue(key, 0.5)

        self._watches[vmi_uid] = asyncio.get_running_loop().create_task(follow())

    def _unwatch(self, vmi_uid: str) -> None:
        self._synced_sizes.pop(vmi_uid, None)
        self._last_seen.pop(vmi_uid, None)
        task = self._watches.pop(vmi_uid, None)
        if task is not None:
            task.cancel()

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        vmi = self.vmis.get(key)
        record = self.records.get(key)
        if vmi is None:
            self.panics.forget(key)
        if vmi is None or (record is not None and vmi["metadata"]["uid"] != record["vmiUid"]):
            if record is not None:
                await self.outgoing.forget(str(record["vmiUid"]))
                return await self._stop_orphan(key, record)
            return None
        if (vmi.get("status") or {}).get("nodeName") != self.node:
            await self.outgoing.forget(vmi["metadata"]["uid"])
            self._last_seen.pop(vmi["metadata"]["uid"], None)
            return None
        pod_uid = active_pod_uid(vmi, self.node, self.pods_dir)
        if not pod_uid:
            return None
        vmi_uid = vmi["metadata"]["uid"]
        self.records.put(key, vmi_uid, pod_uid)
        if migration_state(vmi).get("sourceNode") == self.node:
            migrating = await self.outgoing.step(vmi, self.launcher(pod_uid))
            if migrating is not None:
                return migrating
        try:
            observed, status = await self._observe(vmi, pod_uid)
        except ProtocolMismatch as exc:
            # Nothing the launcher says can be read; the VMI shows why instead of the handler failing on a field.
            await self._sync_failed(vmi, str(exc))
            return Result(requeue_after=10.0)
        self.panics.observe(vmi, status)
        if status is not None and not observed.launcher_exited:
            self._watch(key, vmi, pod_uid)
        marked = status is not None and status["markedForGracefulShutdown"]
        step = next_action(vmi, observed, marked_for_graceful_shutdown=marked)
        if step.action == Action.FINISH:
            return await self._finished(key, vmi, pod_uid, observed)
        if step.action == Action.SHUTDOWN:
            return await self._graceful_shutdown(key, vmi, pod_uid)
        new_phase = step.phase
        if new_phase == c.PHASE_FAILED and observed.launcher_unresponsive:
            self._kill_orphan_qemu(pod_uid, vmi)
        if step.action == Action.START:
            try:
                status = await self.launcher(pod_uid).sync(vmi)
            except CommandFailed as exc:
                await self._sync_failed(vmi, str(exc))
                return Result(requeue_after=10.0)
            observed = observed_domain(status)
            new_phase = phase_for(vmi, observed)
            self._watch(key, vmi, pod_uid)
            self._synced_sizes[vmi_uid] = claim_capacities(vmi)
        elif observed.defined and objects.vmi_phase(vmi) == c.PHASE_RUNNING:
            await self._expand(vmi, pod_uid)
        reported = await self._report(vmi, observed, status, new_phase)
        if observed.launcher_initializing:
            # The launcher's socket appears a fraction of a second after its process starts; this is a stat().
            return Result(requeue_after=0.1)
        if not reported and observed.defined and objects.vmi_phase(vmi) == c.PHASE_RUNNING and wants_launcher(vmi):
            return await self._hotplug(vmi, pod_uid)
        return None

    # ------------------------------------------------------------------------------------------------ expansion

    async def _expand(self, vmi: Object, pod_uid: str) -> None:
        """Sync the running guest again when one of its claims grew: the launcher resizes its disk under it."""
        vmi_uid = vmi["metadata"]["uid"]
        sizes = claim_capacities(vmi)
        if self._synced_sizes.get(vmi_uid) == sizes:
            return
        try:
            await self.launcher(pod_uid).sync(vmi)
        except (CommandFailed, LauncherUnavailable) as exc:
            log.warning("disk expansion: %s", exc, extra=object_fields(vmi))
            return
        self._synced_sizes[vmi_uid] = sizes

    # ------------------------------------------------------------------------------------------------ hotplug

    async def _hotplug(self, vmi: Object, pod_uid: str) -> Result | None:
        """Mount, attach, detach and unmount hotplugged volumes, then report their phases (one step a sync)."""
        update = mark_detaching(vmi)
        if update is None:
            mounts = await claim_mounts(self.client, vmi)
            try:
                reply = await self.launcher(pod_uid).hotplug(vmi, mounts)
            except (CommandFailed, LauncherUnavailable) as exc:
                log.warning("hotplug: %s", exc, extra=object_fields(vmi))
                self.recorder.event(vmi, WARNING, "SyncFailed", str(exc))
                return Result(requeue_after=5.0)
            for error in reply.get("errors") or []:
                # KubeVirt reports a failed hotplug as a failed domain sync.
                self.recorder.event(vmi, WARNING, "SyncFailed", error)
            update = after_sync(vmi, set(reply["mounted"]), reply["attached"])
            memory_dump.follow(update, vmi["metadata"]["name"], reply.get("memoryDump"), datetime.now(UTC))
        if update.statuses != (vmi.get("status") or {}).get("volumeStatus"):
            if await self._patch(vmi, {"volumeStatus": update.statuses}):
                for reason, message in update.events:
                    self.recorder.event(vmi, NORMAL, reason, message)
        # KubeVirt's handler looks again a second later while a volume is on its way.
        return Result(requeue_after=1.0) if update.pending else None

    # ------------------------------------------------------------------------------------------------ shutdown

    async def _graceful_shutdown(self, key: str, vmi: Object, pod_uid: str) -> Result | None:
        """ACPI shutdown, re-sent every ≤5 s, destroy when the grace period is over (KubeVirt's processVmShutdown)."""
        grace = grace_period(vmi)
        started = self.records.shutdown_started(key)
        now = self.clock()
        launcher = self.launcher(pod_uid)
        if started is None:
            started = now
            self.records.start_shutdown(key, now)
            if grace > 0:
                self.recorder.event(vmi, NORMAL, "ShuttingDown", "Signaled Graceful Shutdown")
        step = shutdown_step(grace, started, now)
        if step.kill:
            with contextlib.suppress(LauncherUnavailable, CommandFailed):
                await launcher.kill()
            self.recorder.event(vmi, NORMAL, "Deleted", "VirtualMachineInstance stopping")
            log.info("grace period of %ss over; destroyed the domain", grace, extra=object_fields(vmi))
            return Result(requeue_after=step.requeue_after)
        with contextlib.suppress(LauncherUnavailable, CommandFailed):
            await launcher.shutdown()
        return Result(requeue_after=step.requeue_after)

    async def _finished(self, key: str, vmi: Object, pod_uid: str, observed: Observed) -> Result | None:
        """A final VMI: the domain is undefined and the launcher goes; the record of it is dropped."""
        if observed.defined:
            with contextlib.suppress(LauncherUnavailable, CommandFailed):
                await self.launcher(pod_uid).delete()
                self.recorder.event(vmi, NORMAL, "Deleted", "Signaled Deletion")
        self._unwatch(vmi["metadata"]["uid"])
        self.records.remove(key)
        return None

    async def _stop_orphan(self, key: str, record: dict[str, Any]) -> Result | None:
        """The VMI is gone (deleted while we were away, or replaced): its guest must not keep running."""
        launcher = self.launcher(str(record["podUid"]))
        try:
            status = await launcher.status()
        except LauncherUnavailable:
            self._migrated_away.pop(key, None)
            self.records.remove(key)
            return None
        domain = status["domain"]
        if domain["defined"] and domain["state"] not in STOPPED_STATES:
            if self._ends_by_migration(key, status):
                return Result(requeue_after=0.5)
            log.warning("VMI %s is gone; destroying its domain", key, extra={"uid": record["vmiUid"]})
            with contextlib.suppress(CommandFailed):
                await launcher.kill()
            return Result(requeue_after=0.5)
        with contextlib.suppress(CommandFailed, LauncherUnavailable):
            await launcher.delete()
        self._migrated_away.pop(key, None)
        self._unwatch(str(record["vmiUid"]))
        self.records.remove(key)
        return None

    def _ends_by_migration(self, key: str, status: Status) -> bool:
        """The VMI left this node because the target took it over, while libvirt here still finishes the job.

        The target handler takes the VMI over as soon as the guest runs there, a moment before the source's libvirt
        confirms and shuts its QEMU off as Migrated; destroying it then would end the job as Destroyed. The wait is
        bounded: a VMI force-deleted mid-migration must not keep its guest."""
        if not leaving_by_migration(status.get("migration")):
            return False
        since = self._migrated_away.setdefault(key, self.clock())
        return self.clock() - since < MIGRATED_SOURCE_WAIT_SECONDS

    def _kill_orphan_qemu(self, pod_uid: str, vmi: Object) -> None:
        """A dead launcher leaves its QEMU behind (libvirt daemonizes it); a pod's processes die with the pod."""
        root = Path(pod_layout.embed_root(pod_uid))
        name = domain_name(vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        for pid_file in root.glob(f"run/qemu/{name}.pid"):
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGKILL)
                log.warning("killed QEMU %d left behind by a dead launcher", pid, extra=object_fields(vmi))
            except (OSError, ValueError):
                pass

    # ------------------------------------------------------------------------------------------------ status

    async def _sync_failed(self, vmi: Object, message: str) -> None:
        self.recorder.event(vmi, WARNING, "SyncFailed", message)
        conditions = sync_failed_conditions(vmi.get("status") or {}, message, now_rfc3339())
        await self._patch(vmi, {"conditions": conditions})

    async def _report(self, vmi: Object, observed: Observed, status: Status | None, new_phase: str) -> bool:
        """Write what the domain shows; True when the VMI was patched (or had moved on) and so is now stale."""
        current = vmi.get("status") or {}
        interfaces = status.get("interfaces") if status is not None else None
        if interfaces is not None:
            interfaces = keep_controller_part(current.get("interfaces") or [], interfaces)
        now = now_rfc3339()
        changes = status_changes(current, observed, interfaces, new_phase, now)
        agent = agent_status(vmi, changes, status, now)
        changes.update(agent.changes)
        for field in agent.unchanged:
            changes.pop(field, None)
        if (changes.get("phase") or current.get("phase")) == c.PHASE_RUNNING:
            changes.update(migratability_changes(vmi, changes.get("conditions"), now))
            changes.update(memory_changes(vmi, status))
        phase = current.get("phase") or ""
        if not changes:
            return False
        if await self._patch(vmi, changes):
            for kind, reason, message in agent.events:
                self.recorder.event(vmi, kind, reason, message)
            if changes.get("phase") == c.PHASE_RUNNING:
                self.recorder.event(vmi, NORMAL, "Started", "VirtualMachineInstance started.")
                if status is not None and status.get("networkFallback"):
                    self.recorder.event(vmi, WARNING, "NetworkFallback", str(status["networkFallback"]))
            elif changes.get("phase") == c.PHASE_SUCCEEDED:
                self.recorder.event(vmi, NORMAL, "Stopped", "The VirtualMachineInstance was shut down.")
            elif changes.get("phase") == c.PHASE_FAILED:
                self.recorder.event(vmi, WARNING, "Stopped", "The VirtualMachineInstance crashed.")
            if "phase" in changes:
                log.info("VMI phase %s → %s", phase or "-", changes["phase"], extra=object_fields(vmi))
        return True

    async def _patch(self, vmi: Object, changes: dict[str, Any]) -> bool:
        """A JSON patch guarded by the resourceVersion the decision was made on; False when the VMI moved on."""
        meta = vmi["metadata"]
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
        ]
        if "status" not in vmi:
            ops.append({"op": "add", "path": "/status", "value": changes})
        else:
            # None removes a field (one the status had: changes only name what differs).
            ops.extend(
                {"op": "remove", "path": f"/status/{field}"}
                if value is None
                else {"op": "add", "path": f"/status/{field}", "value": value}
                for field, value in changes.items()
            )
        try:
            patched = await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES, meta["name"], ops, meta["namespace"], patch_type=JSON_PATCH
            )
        except (Invalid, NotFound):
            self.enqueue(f"{meta['namespace']}/{meta['name']}", 0.1)
            return False
        except ApiError as exc:
            log.warning("could not update the VMI: %s", exc.message, extra=object_fields(vmi))
            raise
        self.vmis.wrote(patched, meta["resourceVersion"])
        return True
