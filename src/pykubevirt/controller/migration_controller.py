"""The VirtualMachineInstanceMigration controller: target pod, hand-over to virt-handler, phases to the end.

Upstream: pkg/virt-controller/watch/migration/migration.go (processMigrationPhase, handleTargetPodCreation,
handleTargetPodHandoff). Phases: Pending → Scheduling (target pod created) → Scheduled (target pod ready) →
PreparingTarget (VMI `migrationState` handed to the handlers) → TargetReady (the target handler listens) → Running
(the source started) → Succeeded or Failed. Deleting an unfinished migration cancels it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pykubevirt.api import backend_storage as bs
from pykubevirt.api import constants as c
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import MIGRATIONS, PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.config.migration_policy import effective_migration_configuration
from pykubevirt.controller import pod_state
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.controller.workload_updater import hotplug_in_progress

log = logging.getLogger("pykubevirt.controller.migration")

FINAL = ("Succeeded", "Failed")
# Target pods that cannot start (handleTargetPodCreation's timeouts); per-migration annotations override them.
UNSCHEDULABLE_TIMEOUT_SECONDS = 300
PENDING_TIMEOUT_SECONDS = 900
UNSCHEDULABLE_TIMEOUT_ANNOTATION = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
PENDING_TIMEOUT_ANNOTATION = "kubevirt.io/migrationPendingPodTimeoutSeconds"
# Phases that count against the parallelism limits (KubeVirt counts migrations with a target pod under way).
ACTIVE = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
ABORT_REQUESTED = "migrationAbortRequested"
MIGRATION_JOB_NAME_ANNOTATION = "kubevirt.io/migrationJobName"
TARGET_READY_ANNOTATION = "kubevirt.io/migration-target-ready-timestamp"
MIGRATION_TARGET_FLAG = "--migration-target"
CANCELED = "Migration failed due to being canceled"


def target_pod(vmi: Object, vmim: Object, settings: LauncherSettings, backend_claim: str = "") -> Object:
    """KubeVirt's RenderMigrationManifest: the launcher pod, labelled for the job, kept off the source node.

    `backend_claim` is the claim with the VMI's persistent EFI/TPM state the target mounts (the source's, shared)."""
    pod = render_launcher_pod(vmi, settings, backend_claim=backend_claim)
    meta = pod["metadata"]
    meta.setdefault("labels", {})[c.MIGRATION_JOB_UID_LABEL] = vmim["metadata"]["uid"]
    meta.setdefault("annotations", {})[MIGRATION_JOB_NAME_ANNOTATION] = vmim["metadata"]["name"]
    # KubeVirt's createMigrationPodAntiAffinityRule: never beside the VMI's own launcher pod, added to the VMI's rules.
    term = {
        "labelSelector": {"matchLabels": {c.CREATED_BY_LABEL: vmi["metadata"]["uid"]}},
        "topologyKey": "kubernetes.io/hostname",
    }
    anti = pod["spec"].setdefault("affinity", {}).setdefault("podAntiAffinity", {})
    anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(term)
    for container in pod["spec"]["containers"]:
        if container.get("name") == c.LAUNCHER_COMPUTE_CONTAINER:
            container["args"] = [*(container.get("args") or []), MIGRATION_TARGET_FLAG]
    return pod


def backend_storage_step(vmi: Object) -> str:
    """Whether a Pending migration may create its target pod, as far as the VMI's persistent EFI/TPM state goes."""
    if not bs.is_needed(vmi):
        return "create-pod"
    current = bs.current_claim(vmi)
    if current is None:
        return "wait"  # KubeVirt's handleBackendStorage retries until volumeStatus names the claim
    if bs.SHARED_ACCESS_MODE not in current[1]:
        # Admission refuses such a migration (LiveMigratable=False); one created before the condition was written
        # ends here instead of with a target pod that could not mount the claim.
        return f"fail:{bs.NOT_SHARED_MESSAGE}"
    return "create-pod"


def parse_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def migration_state(vmi: Object) -> dict[str, Any]:
    return dict((vmi.get("status") or {}).get("migrationState") or {})


class MigrationController:
    """Reconciles one VirtualMachineInstanceMigration key at a time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        migrations: Informer,
        vmis: Informer,
        pods: Informer,
        recorder: EventRecorder,
        settings: Callable[[], LauncherSettings],
        clock: Callable[[], str] = now_rfc3339,
        policies: Informer | None = None,
        namespaces: Informer | None = None,
    ) -> None:
        self.client = client
        self.migrations = migrations
        self.vmis = vmis
        self.pods = pods
        self.recorder = recorder
        self.settings = settings
        self.clock = clock
        # MigrationPolicies and namespaces, for the policy a VMI migrates with (None: the cluster's settings only).
        self.policies = policies
        self.namespaces = namespaces
        # Migrations whose target pod this controller created and the pod informer has not shown yet.
        self._created: set[str] = set()

    def keys_for_vmi(self, vmi: Object) -> list[str]:
        namespace, name = vmi["metadata"].get("namespace"), vmi["metadata"]["name"]
        return [
            f"{namespace}/{m['metadata']['name']}"
            for m in self.migrations.items()
            if m["metadata"].get("namespace") == namespace and (m.get("spec") or {}).get("vmiName") == name
        ]

    def keys_for_pod(self, pod: Object) -> list[str]:
        name = ((pod.get("metadata") or {}).get("annotations") or {}).get(MIGRATION_JOB_NAME_ANNOTATION)
        return [f"{pod['metadata'].get('namespace')}/{name}"] if name else []

    def _target_pod(self, vmim: Object) -> Object | None:
        uid = vmim["metadata"]["uid"]
        for pod in self.pods.items():
            if ((pod.get("metadata") or {}).get("labels") or {}).get(c.MIGRATION_JOB_UID_LABEL) == uid:
                return pod
        return None

    async def reconcile(self, key: str) -> Result | None:
        cached = self.migrations.get(key)
        if cached is None:
            return None
        vmim = copy.deepcopy(cached)
        namespace = vmim["metadata"]["namespace"]
        status = vmim.setdefault("status", {})
        phase = str(status.get("phase") or "")
        vmi = self.vmis.get(f"{namespace}/{(vmim.get('spec') or {}).get('vmiName')}")
        pod = self._target_pod(vmim)
        if pod is not None or phase in FINAL:
            self._created.discard(vmim["metadata"]["uid"])
        if vmim["metadata"].get("deletionTimestamp"):
            return await self._cancel(cached, vmim, vmi, pod)
        if phase in FINAL:
            return None
        outcome = self._next(vmim, vmi, pod)
        if outcome == "create-pod" and vmi is not None:
            created = await self._create_target(vmim, vmi)
            if created:
                self._set_phase(vmim, "Scheduling")
        elif outcome == "handoff" and vmi is not None and pod is not None:
            await self._handoff(vmim, vmi, pod)
            self._set_phase(vmim, "PreparingTarget")
        elif outcome.startswith("fail:"):
            await self._fail(vmim, vmi, pod, outcome.removeprefix("fail:"))
        elif outcome.startswith(("unschedulable", "delete-pod:")) and vmi is not None and pod is not None:
            await self._pending_target(vmim, vmi, pod, outcome)
        elif outcome.startswith("phase:"):
            self._set_phase(vmim, outcome.removeprefix("phase:"))
            if vmim["status"]["phase"] == "Succeeded" and vmi is not None:
                vmim["status"]["migrationState"] = migration_state(vmi)
                self.recorder.event(vmim, NORMAL, "SuccessfulMigration", "Source node reported migration succeeded")
        if vmim != cached:
            await self._write_status(vmim)
        return None if vmim["status"].get("phase") in FINAL else Result(requeue_after=5.0)

    def _next(self, vmim: Object, vmi: Object | None, pod: Object | None) -> str:
        """What to do next from the phase, the VMI and the target pod (processMigrationPhase)."""
        phase = str(vmim["status"].get("phase") or "")
        uid = vmim["metadata"]["uid"]
        if vmi is None or vmi["metadata"].get("deletionTimestamp"):
            return "fail:Migration failed because vmi does not exist."
        vmi_phase = (vmi.get("status") or {}).get("phase")
        if vmi_phase in c.FINAL_PHASES:
            return "fail:Migration failed vmi shutdown during migration."
        state = migration_state(vmi)
        if phase == "":
            for other in self.migrations.items():
                same_vmi = (other.get("spec") or {}).get("vmiName") == (vmim.get("spec") or {}).get("vmiName")
                other_phase = (other.get("status") or {}).get("phase") or ""
                if (
                    same_vmi
                    and other["metadata"]["uid"] != uid
                    and other["metadata"].get("namespace") == vmim["metadata"]["namespace"]
                    and other_phase not in ("", *FINAL)
                ):
                    return "fail:VMI is not eligible for migration because another migration job is in progress."
            return "phase:Pending"
        handed_off = phase in ("PreparingTarget", "TargetReady", "Running")
        if handed_off and state.get("migrationUid") != uid:
            if not state:
                return "fail:VMI's migration state was cleared during the active migration."
            return "fail:VMI's migration state was taken over by another migration job during active migration."
        if handed_off and state.get("failed"):
            return "fail:source node reported migration failed"
        if phase == "Running" and state.get("completed"):
            # A hotplug migration succeeds once the target has plugged the vCPUs or memory too.
            return "wait" if hotplug_in_progress(vmi) else "phase:Succeeded"
        if phase in ("Scheduling", "Scheduled", *(("PreparingTarget", "TargetReady", "Running") if handed_off else ())):
            if pod is None and uid in self._created:
                return "wait"  # created, not in the pod informer yet (KubeVirt's pod expectations)
            if pod is None:
                return "fail:Migration target pod was removed during active migration."
            if pod_state.is_down_or_going_down(pod):
                return "fail:Migration failed because target pod shutdown during migration"
        if phase == "Pending":
            if pod is not None:
                return "phase:Scheduling"
            if vmi_phase != c.PHASE_RUNNING or self._at_limit(vmim, vmi):
                return "wait"
            return backend_storage_step(vmi)
        if phase == "Scheduling":
            if pod is not None and pod_state.is_ready_for_handover(pod):
                return "phase:Scheduled"
            return self._pending_too_long(vmim, pod) if pod is not None else "wait"
        if phase == "Scheduled":
            return "handoff"
        if phase == "PreparingTarget":
            return "phase:TargetReady" if state.get("targetNodeAddress") else "wait"
        if phase == "TargetReady":
            return "phase:Running" if state.get("startTimestamp") else "wait"
        return "wait"

    def _pending_too_long(self, vmim: Object, pod: Object) -> str:
        """KubeVirt's target pod timeouts: 300 s unschedulable, 900 s pending (per-migration annotations override).

        "unschedulable" while the scheduler finds no node; "delete-pod:<why>" once a timeout passed
        (handlePendingPodTimeout: the pod is deleted; the migration then fails as one whose target pod was removed)."""
        annotations = vmim["metadata"].get("annotations") or {}
        created = parse_time(str(pod["metadata"].get("creationTimestamp") or ""))
        if created is None or pod_state.pod_phase(pod) != "Pending" or pod["metadata"].get("deletionTimestamp"):
            return "wait"
        age = (parse_time(self.clock()) or created) - created
        name = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        unschedulable = any(
            x.get("type") == "PodScheduled" and x.get("status") == "False" and x.get("reason") == "Unschedulable"
            for x in (pod.get("status") or {}).get("conditions") or []
        )
        limit = float(annotations.get(UNSCHEDULABLE_TIMEOUT_ANNOTATION, UNSCHEDULABLE_TIMEOUT_SECONDS))
        if unschedulable and age.total_seconds() >= limit:
            return f"delete-pod:unschedulable pod {name} timeout period exceeded"
        limit = float(annotations.get(PENDING_TIMEOUT_ANNOTATION, PENDING_TIMEOUT_SECONDS))
        if age.total_seconds() >= limit:
            return f"delete-pod:pending pod {name} timeout period exceeded"
        return "unschedulable" if unschedulable else "wait"

    async def _pending_target(self, vmim: Object, vmi: Object, pod: Object, outcome: str) -> None:
        """A target pod the scheduler cannot place is reported; one past its timeout is deleted (the next pass fails
        the migration: its target pod was removed)."""
        meta = vmi["metadata"]
        if outcome == "unschedulable":
            vmi_key = f"{meta.get('namespace')}/{meta['name']}"
            message = f"Migration target pod for VMI [{vmi_key}] is currently unschedulable."
            self.recorder.event(vmim, WARNING, "MigrationTargetPodUnschedulable", message)
            return
        try:
            await self.client.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        except NotFound:
            return
        except ApiError as exc:
            self.recorder.event(vmim, WARNING, "FailedDelete", f"Error deleted migration target pod: {exc.message}")
            return
        self.recorder.event(vmim, NORMAL, "SuccessfulDelete", outcome.removeprefix("delete-pod:"))

    def _at_limit(self, vmim: Object, vmi: Object) -> bool:
        """parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode (handleTargetPodCreation)."""
        limits = self.settings().cluster.migrations
        active = [
            m
            for m in self.migrations.items()
            if (m.get("status") or {}).get("phase") in ACTIVE and m["metadata"]["uid"] != vmim["metadata"]["uid"]
        ]
        if len(active) >= limits.parallel_migrations_per_cluster:
            return True
        node = (vmi.get("status") or {}).get("nodeName")
        outbound = 0
        for other in active:
            namespace = other["metadata"].get("namespace")
            source = self.vmis.get(f"{namespace}/{(other.get('spec') or {}).get('vmiName')}")
            if source is not None and (source.get("status") or {}).get("nodeName") == node:
                outbound += 1
        return outbound >= limits.parallel_outbound_migrations_per_node

    def _set_phase(self, vmim: Object, phase: str) -> None:
        status = vmim["status"]
        if status.get("phase") == phase:
            return
        status["phase"] = phase
        stamps = status.setdefault("phaseTransitionTimestamps", [])
        stamps.append({"phase": phase, "phaseTransitionTimestamp": self.clock()})

    async def _create_target(self, vmim: Object, vmi: Object) -> bool:
        try:
            claim = ""
            if bs.is_needed(vmi):
                # handleBackendStorage: a shared claim is the target's too; both names go on the migration's state.
                claim = bs.migration_target_claim(vmi)
                names = {"sourcePersistentStatePVCName": claim, "targetPersistentStatePVCName": claim}
                vmim["status"].setdefault("migrationState", {}).update(names)
            rendered = target_pod(vmi, vmim, self.settings(), backend_claim=claim)
            pod = await self.client.create(PODS, rendered, vmim["metadata"]["namespace"])
        except bs.BackendStorageError as exc:
            self.recorder.event(vmim, WARNING, "FailedCreate", f"Error creating pod: {exc}")
            return False
        except (ApiError, ValueError, KeyError) as exc:
            message = getattr(exc, "message", str(exc))
            self.recorder.event(vmim, WARNING, "FailedCreate", f"Error creating pod: {message}")
            return False
        self._created.add(vmim["metadata"]["uid"])
        self.recorder.event(vmim, NORMAL, "SuccessfulCreate", f"Created migration target pod {pod['metadata']['name']}")
        return True

    async def _handoff(self, vmim: Object, vmi: Object, pod: Object) -> None:
        """handleTargetPodHandoff: the VMI's migrationState names both ends, and the target node is labelled."""
        status = vmi.get("status") or {}
        source_pod = next(
            (
                p["metadata"]["name"]
                for p in self.pods.items()
                if p["metadata"].get("uid") in (status.get("activePods") or {})
                and (p.get("spec") or {}).get("nodeName") == status.get("nodeName")
                and p["metadata"]["uid"] != pod["metadata"]["uid"]
            ),
            "",
        )
        target_node = str((pod.get("spec") or {}).get("nodeName") or "")
        # The settings it runs with: KubeVirt's defaults under the KubeVirt CR's, the matching MigrationPolicy's over.
        policies = self.policies.items() if self.policies is not None else ()
        namespace = self.namespaces.get(str(vmi["metadata"].get("namespace"))) if self.namespaces is not None else None
        effective = effective_migration_configuration(self.settings().cluster.migrations, policies, vmi, namespace)
        state = {
            "migrationConfiguration": effective.configuration,
            "migrationUid": vmim["metadata"]["uid"],
            "targetNode": target_node,
            "sourceNode": status.get("nodeName", ""),
            "targetPod": pod["metadata"]["name"],
            "sourcePod": source_pod,
        }
        if effective.policy_name is not None:
            state["migrationPolicyName"] = effective.policy_name
        for name in ("sourcePersistentStatePVCName", "targetPersistentStatePVCName"):
            if (value := (vmim["status"].get("migrationState") or {}).get(name)) is not None:
                state[name] = value
        # The new state replaces an earlier migration's whole (KubeVirt replaces /status/migrationState): a merge patch
        # would keep its `failed`, `abortStatus` or `completed`, and this migration would end before it began.
        state = {**{key: None for key in migration_state(vmi)}, **state}
        patch = {
            "metadata": {"labels": {c.MIGRATION_TARGET_NODE_NAME_LABEL: target_node}},
            "status": {"migrationState": state},
        }
        # A VMI has no status subresource (KubeVirt's CRD has none): labels and status go in one patch.
        await self.client.patch(VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], patch, vmi["metadata"]["namespace"])

    async def _fail(self, vmim: Object, vmi: Object | None, pod: Object | None, message: str) -> None:
        self._set_phase(vmim, "Failed")
        self.recorder.event(vmim, WARNING, "FailedMigration", message)
        if vmi is not None and migration_state(vmi).get("migrationUid") == vmim["metadata"]["uid"]:
            vmim["status"]["migrationState"] = migration_state(vmi)
        if pod is not None and not migration_state(vmi or {}).get("completed"):
            with contextlib.suppress(NotFound):
                await self.client.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])

    async def _cancel(self, cached: Object, vmim: Object, vmi: Object | None, pod: Object | None) -> Result | None:
        """A deleted migration is cancelled: before the hand-over its target pod goes, after it the source aborts."""
        status = vmim["status"]
        phase = str(status.get("phase") or "")
        if phase not in FINAL:
            conditions = [x for x in status.get("conditions") or [] if x.get("type") != ABORT_REQUESTED]
            status["conditions"] = [*conditions, {"type": ABORT_REQUESTED, "status": "True"}]
            state = migration_state(vmi) if vmi is not None else {}
            started = state.get("migrationUid") == vmim["metadata"]["uid"] and state.get("startTimestamp")
            if started and not state.get("failed") and not state.get("completed"):
                if not state.get("abortRequested") and vmi is not None:
                    await self.client.patch(
                        VIRTUAL_MACHINE_INSTANCES,
                        vmi["metadata"]["name"],
                        {"status": {"migrationState": {"abortRequested": True}}},
                        vmi["metadata"]["namespace"],
                    )
                    self.recorder.event(vmim, NORMAL, "Migrating", "VirtualMachineInstance is aborting migration.")
            elif state.get("completed") and started:
                self._set_phase(vmim, "Succeeded")
            else:
                # Handed off and aborted by the source, KubeVirt's updateStatus takes it as any failure the source
                # reported; before the hand-over it is the cancel itself.
                aborted = started and state.get("failed")
                reason = "source node reported migration failed" if aborted else CANCELED
                await self._fail(vmim, vmi, pod, reason)
                if vmi is not None and state.get("migrationUid") == vmim["metadata"]["uid"]:
                    await self._clear_handoff(vmi)
        if vmim != cached:
            await self._write_status(vmim)
        if status.get("phase") in FINAL:
            finalizers = [f for f in vmim["metadata"].get("finalizers") or [] if f != c.MIGRATION_FINALIZER]
            if finalizers != (vmim["metadata"].get("finalizers") or []):
                with contextlib.suppress(NotFound):
                    await self.client.patch(
                        MIGRATIONS,
                        vmim["metadata"]["name"],
                        {"metadata": {"finalizers": finalizers or None}},
                        vmim["metadata"]["namespace"],
                    )
            return None
        return Result(requeue_after=1.0)

    async def _clear_handoff(self, vmi: Object) -> None:
        """A migration cancelled before its source started leaves the VMI as it was."""
        name, namespace = vmi["metadata"]["name"], vmi["metadata"]["namespace"]
        with contextlib.suppress(NotFound):
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                name,
                {"metadata": {"labels": {c.MIGRATION_TARGET_NODE_NAME_LABEL: None}}},
                namespace,
            )

    async def _write_status(self, vmim: Object) -> None:
        with contextlib.suppress(NotFound):
            await self.client.patch(
                MIGRATIONS,
                vmim["metadata"]["name"],
                {"status": vmim["status"]},
                vmim["metadata"]["namespace"],
                subresource="status",
            )
