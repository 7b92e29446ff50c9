"""The embedded kube-scheduler: binds each pod without a node to the least allocated node that fits it.

Pods are decided one at a time (as kube-scheduler's scheduling cycle is), so every decision sees the previous ones:
a pod is "assumed" on its node from the decision until the pod cache shows it bound. A pod nothing fits gets
`PodScheduled=False` (reason Unschedulable, kube-scheduler's message) and is retried when nodes or bound pods change,
and at least every `retry_interval` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import objects
from pykubevirt.api.pod_defaults import DEFAULT_SCHEDULER_NAME
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.api.volume_binding import SELECTED_NODE
from pykubevirt.client.api import STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.controller import Controller, Result
from pykubevirt.client.errors import Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import EventHandler, Informer, object_key
from pykubevirt.client.resources import (
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    STORAGE_CLASSES,
)
from pykubevirt.node.node_usage import NodeUsage
from pykubevirt.node.pod_affinity import ERR_AFFINITY, AffinityCheck, Labels, PlacedPod, PodTerms
from pykubevirt.node.scheduling_predicates import (
    NodeInfo,
    PodUsage,
    is_ready,
    is_terminal,
    matches_node_affinity,
    node_allocatable,
    select_node,
    unschedulable_message,
    untolerated_taint,
)
from pykubevirt.node.topology_spread import ERR_CONSTRAINTS, NodeView, SpreadCheck, constraints_of
from pykubevirt.node.volume_scheduling import ERR_NO_VOLUME, PodClaims, node_volume_reasons, pod_claims

log = logging.getLogger("pykubevirt.node.scheduler")

RETRY_INTERVAL_SECONDS = 10.0
# How long a bound pod stays assumed if the pod cache never shows its binding (it normally does within ms).
ASSUME_TTL_SECONDS = 30.0
POD_SCHEDULED = "PodScheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
REASON_GATED = "SchedulingGated"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def _meta(obj: Object) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def node_signature(node: Object) -> tuple[Any, ...]:
    """What scheduling depends on; heartbeats change none of it, so they do not wake unschedulable pods."""
    meta = _meta(node)
    spec = node.get("spec") or {}
    return (
        sorted((meta.get("labels") or {}).items()),
        repr(spec.get("taints") or []),
        bool(spec.get("unschedulable")),
        sorted(node_allocatable(node).items()),
        is_ready(node),
    )


@dataclass(slots=True)
class _Assumed:
    uid: str
    node: str
    usage: PodUsage
    # None while the binding is in flight; afterwards, when to stop counting the pod if its binding never shows up.
    expires: float | None = None


class Scheduler:
    """Watches pods and nodes and binds pending pods of the named schedulers; `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        *,
        scheduler_names: Iterable[str] = (DEFAULT_SCHEDULER_NAME,),
        retry_interval: float = RETRY_INTERVAL_SECONDS,
        recorder: EventRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.scheduler_names = frozenset(scheduler_names)
        self.retry_interval = retry_interval
        self.recorder = recorder or EventRecorder(client, DEFAULT_SCHEDULER_NAME)
        self.clock = clock
        self.pods = Informer(client, PODS)
        self.nodes = Informer(client, NODES)
        self.claims = Informer(client, PERSISTENT_VOLUME_CLAIMS)
        self.volumes = Informer(client, PERSISTENT_VOLUMES)
        self.classes = Informer(client, STORAGE_CLASSES)
        self.namespaces = Informer(client, NAMESPACES)
        # One worker: decisions are serial so each one accounts for the pods placed before it.
        self.controller = Controller("scheduler", self, workers=1)
        self.controller.informers += [self.pods, self.nodes, self.claims, self.volumes, self.classes, self.namespaces]
        # Pods whose WaitForFirstConsumer claims were given a node and are not bound yet (PreBind waits for them).
        self._waiting_for_volumes: set[str] = set()
        self._assumed: dict[str, _Assumed] = {}
        self._unschedulable: set[str] = set()
        self._usage: dict[str, PodUsage] = {}
        # Bound, unfinished pods with pod (anti-)affinity terms: the only placed pods a pod without terms must heed.
        self._with_terms: dict[str, PodTerms] = {}
        # Unschedulable pods some node refused for want of a pod to be near, or to even out a spread: a newly bound
        # pod may be what they wait for.
        self._awaiting_pods: set[str] = set()
        self.node_usage = NodeUsage()
        self.bindings = 0
        self.pods.add_handler(
            EventHandler(
                on_add=lambda p: self._pod_changed(None, p), on_update=self._pod_changed, on_delete=self._pod_gone
            )
        )
        self.nodes.add_handler(EventHandler(on_add=lambda n: self._wake_unschedulable(), on_update=self._node_changed))
        for storage in (self.claims, self.volumes, self.classes):
            storage.add_handler(
                EventHandler(on_add=lambda o: self._storage_changed(), on_update=lambda o, n: self._storage_changed())
            )

    async def run(self) -> None:
        """Run the informers and the scheduling loop until cancelled."""
        tasks = [
            asyncio.create_task(informer.run(), name=f"scheduler-{informer.resource.plural}")
            for informer in self.controller.informers
        ]
        try:
            await self.controller.run()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------------------------------------ events

    def wants(self, pod: Object) -> bool:
        """A pod this scheduler must place: unbound, ours, not deleting, not finished."""
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or _meta(pod).get("deletionTimestamp") or is_terminal(pod):
            return False
        return (spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME) in self.scheduler_names

    def _pod_changed(self, old: Object | None, pod: Object) -> None:
        key = object_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        self.node_usage.place(key, node, None if not node or is_terminal(pod) else self._usage_of(pod))
        terms = PodTerms.of(pod)
        if node and terms.any and not is_terminal(pod):
            self._with_terms[key] = terms
        else:
            self._with_terms.pop(key, None)
        if self.wants(pod):
            self.controller.queue.add(key)
            return
        self._unschedulable.discard(key)
        self._awaiting_pods.discard(key)
        if node and (old is None or not (old.get("spec") or {}).get("nodeName")):
            for waiting in self._awaiting_pods:
                self.controller.queue.add(waiting)
        if (pod.get("spec") or {}).get("nodeName"):
            assumed = self._assumed.get(key)
            if assumed is not None and assumed.uid == _meta(pod).get("uid"):
                # The cache now counts the pod on its node itself.
                del self._assumed[key]
            if old is not None and not is_terminal(old) and is_terminal(pod):
                self._wake_unschedulable()

    def _pod_gone(self, pod: Object) -> None:
        key = object_key(pod)
        self.node_usage.place(key, None, None)
        self._with_terms.pop(key, None)
        uid = str(_meta(pod).get("uid", ""))
        self._usage.pop(uid, None)
        self._unschedulable.discard(key)
        self._awaiting_pods.discard(key)
        self._waiting_for_volumes.discard(key)
        assumed = self._assumed.get(key)
        if assumed is not None and assumed.uid == uid:
            del self._assumed[key]
        if (pod.get("spec") or {}).get("nodeName") and not is_terminal(pod):
            self._wake_unschedulable()

    def _node_changed(self, old: Object, new: Object) -> None:
        if node_signature(old) != node_signature(new):
            self._wake_unschedulable()

    def _wake_unschedulable(self) -> None:
        for key in list(self._unschedulable):
            self.controller.queue.add(key)

    def _storage_changed(self) -> None:
        """A claim, volume or class changed: pods waiting for a binding or for a claim may go on."""
        self._wake_unschedulable()
        for key in list(self._waiting_for_volumes):
            self.controller.queue.add(key)

    # ------------------------------------------------------------------------------------------------ decisions

    def _usage_of(self, pod: Object) -> PodUsage:
        uid = str(_meta(pod).get("uid", ""))
        usage = self._usage.get(uid)
        if usage is None:
            usage = PodUsage.of(pod)
            if uid:
                self._usage[uid] = usage
        return usage

    def node_infos(self) -> list[NodeInfo]:
        """Every node with the requests of its non-terminal pods, including pods assumed on it."""
        now = self.clock()
        for key in [k for k, a in self._assumed.items() if a.expires is not None and a.expires < now]:
            del self._assumed[key]
        infos: dict[str, NodeInfo] = {}
        for node in sorted(self.nodes.items(), key=lambda n: str(_meta(n).get("name", ""))):
            info = self.node_usage.info(node)
            infos[info.name] = info
        for key, assumed in self._assumed.items():
            # An assumed pod counts until the pod cache shows it on its node.
            target = infos.get(assumed.node)
            if target is not None and self.node_usage.node_of(key) != assumed.node:
                target.add(assumed.usage)
        return list(infos.values())

    async def reconcile(self, key: str) -> Result | None:
        pod = self.pods.get(key)
        if pod is None or not self.wants(pod):
            self._unschedulable.discard(key)
            self._awaiting_pods.discard(key)
            return None
        uid = str(_meta(pod).get("uid", ""))
        assumed = self._assumed.get(key)
        if assumed is not None:
            if assumed.uid == uid and (assumed.expires is None or assumed.expires > self.clock()):
                return None  # bound (or being bound) already; the cache has not caught up
            del self._assumed[key]
        if (pod.get("spec") or {}).get("schedulingGates"):
            await self._set_condition(pod, REASON_GATED, GATED_MESSAGE)
            return None
        usage = self._usage_of(pod)
        infos = self.node_infos()
        needs = pod_claims(pod, self.claims.get, self.volumes.get, self.classes.get)
        if needs.error:
            return await self._unschedulable_pod(key, pod, f"0/{len(infos)} nodes are available: {needs.error}.")
        affinity, spread = self._affinity_check(pod, infos), self._spread_check(pod, infos)
        decision = select_node(pod, infos, usage, self._volume_filter(needs), affinity, spread)
        if decision.node is None:
            self._unschedulable.add(key)
            if any(ERR_AFFINITY in r or ERR_CONSTRAINTS in r for r in decision.reasons.values()):
                self._awaiting_pods.add(key)
            message = unschedulable_message(len(infos), decision.reasons)
            reason = REASON_UNSCHEDULABLE if infos else REASON_SCHEDULER_ERROR
            if await self._set_condition(pod, reason, message):
                self.recorder.event(pod, WARNING, "FailedScheduling", message)
                log.info("pod %s is unschedulable: %s", key, message, extra={"pod": key})
            return Result(requeue_after=self.retry_interval)
        if needs.delayed and not await self._volumes_bound(needs, decision.node):
            self._waiting_for_volumes.add(key)
            return Result(requeue_after=self.retry_interval)
        self._waiting_for_volumes.discard(key)
        await self._bind(key, pod, uid, decision.node, usage)
        return None

    def _placed(self, keys: Iterable[str]) -> Iterator[tuple[str, Object, str]]:
        """(key, pod, node) of these keys' unfinished pods that are bound to a node or assumed on one."""
        for key in keys:
            other = self.pods.get(key)
            node = self.node_usage.node_of(key) or (self._assumed[key].node if key in self._assumed else None)
            if other is not None and node and not is_terminal(other):
                yield key, other, node

    def _assumed_unseen(self) -> list[str]:
        """Pods bound by this scheduler that the pod cache does not show bound yet."""
        return [key for key in self._assumed if self.node_usage.node_of(key) is None]

    def _affinity_check(self, pod: Object, infos: list[NodeInfo]) -> AffinityCheck | None:
        """InterPodAffinity's state for the pod: every placed pod when it has terms, else those that have some."""
        terms = PodTerms.of(pod)
        if not terms.any and not self._with_terms and not self._assumed:
            return None
        node_labels = {info.name: (info.node.get("metadata") or {}).get("labels") or {} for info in infos}
        # Assumed pods are not bound in the cache yet (so not in _with_terms either): always looked at.
        keys = [*(self.node_usage.placed_keys() if terms.any else self._with_terms), *self._assumed_unseen()]
        placed = []
        for key, other, node in self._placed(keys):
            other_terms = self._with_terms.get(key) or PodTerms.of(other)
            if node in node_labels and (terms.any or other_terms.any):
                placed.append(PlacedPod(other, node_labels[node], other_terms))
        return AffinityCheck(pod, placed, self._namespace_labels)

    def _spread_check(self, pod: Object, infos: list[NodeInfo]) -> SpreadCheck | None:
        """PodTopologySpread's state for a pod with constraints: every placed pod, by node."""
        if not constraints_of(pod):
            return None
        nodes = [
            NodeView(
                info.name,
                (info.node.get("metadata") or {}).get("labels") or {},
                matches_node_affinity(pod, info.node),
                untolerated_taint(pod, info.node) is None,
            )
            for info in infos
        ]
        keys = [*self.node_usage.placed_keys(), *self._assumed_unseen()]
        return SpreadCheck(pod, nodes, [(other, node) for _, other, node in self._placed(keys)])

    def _namespace_labels(self, name: str) -> Labels:
        namespace = self.namespaces.get(name)
        return (_meta(namespace).get("labels") or {}) if namespace is not None else {}

    def _volume_filter(self, needs: PodClaims) -> Callable[[NodeInfo], list[str]] | None:
        if not needs.bound_volumes and not needs.delayed:
            return None
        # A claim given a node already stays with it until bound, whatever else changed meanwhile.
        chosen = {
            str(annotation)
            for pvc in needs.delayed
            if (annotation := ((pvc.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE))
        }

        def reasons(info: NodeInfo) -> list[str]:
            if chosen and info.name not in chosen:
                return [ERR_NO_VOLUME]
            return node_volume_reasons(info.node, needs, self.volumes.items(), self.classes.get)

        return reasons

    async def _volumes_bound(self, needs: PodClaims, node: str) -> bool:
        """PreBind: give each delayed claim the node, then wait (woken by claim events) until all are bound."""
        for pvc in needs.delayed:
            meta = _meta(pvc)
            if (meta.get("annotations") or {}).get(SELECTED_NODE) == node:
                continue
            patch = {"metadata": {"annotations": {SELECTED_NODE: node}}}
            with contextlib.suppress(NotFound):
                await self.client.patch(PERSISTENT_VOLUME_CLAIMS, str(meta["name"]), patch, str(meta["namespace"]))
                log.info("claim %s/%s: selected node %s", meta["namespace"], meta["name"], node)
        return False

    async def _unschedulable_pod(self, key: str, pod: Object, message: str) -> Result:
        self._unschedulable.add(key)
        if await self._set_condition(pod, REASON_UNSCHEDULABLE, message):
            self.recorder.event(pod, WARNING, "FailedScheduling", message)
            log.info("pod %s is unschedulable: %s", key, message, extra={"pod": key})
        return Result(requeue_after=self.retry_interval)

    async def _bind(self, key: str, pod: Object, uid: str, node: str, usage: PodUsage) -> None:
        meta = _meta(pod)
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        self._assumed[key] = _Assumed(uid, node, usage)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.client.request("POST", PODS.path(namespace, name, "binding"), body=binding)
        except (Conflict, NotFound) as exc:
            # Bound by someone else meanwhile, being deleted, or gone: the pod cache will tell what happened.
            self._assumed.pop(key, None)
            log.info("binding %s to %s not needed: %s", key, node, exc, extra={"pod": key, "node": node})
            return
        except BaseException:
            self._assumed.pop(key, None)
            raise
        current = self._assumed.get(key)
        if current is not None and current.uid == uid:
            current.expires = self.clock() + ASSUME_TTL_SECONDS
        self._unschedulable.discard(key)
        self._awaiting_pods.discard(key)
        self.bindings += 1
        log.info("bound %s to %s", key, node, extra={"pod": key, "node": node})
        self.recorder.event(pod, NORMAL, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}")
        previous = objects.condition(pod, POD_SCHEDULED)
        if previous is not None and previous.get("status") != "True":
            # kube-apiserver's binding turns PodScheduled True; do it here so an old Unschedulable does not linger.
            with contextlib.suppress(NotFound):
                condition = {"type": POD_SCHEDULED, "status": "True", "lastTransitionTime": now_rfc3339()}
                await self._patch_condition(pod, {**condition, "reason": None, "message": None})

    async def _set_condition(self, pod: Object, reason: str, message: str) -> bool:
        """Set PodScheduled=False with `reason` and `message`; False when it already says exactly that."""
        current = objects.condition(pod, POD_SCHEDULED) or {}
        if current.get("status") == "False" and current.get("reason") == reason and current.get("message") == message:
            return False
        transition = current.get("lastTransitionTime") if current.get("status") == "False" else None
        condition = {
            "type": POD_SCHEDULED,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": transition or now_rfc3339(),
        }
        try:
            await self._patch_condition(pod, condition)
        except NotFound:
            return False
        return True

    async def _patch_condition(self, pod: Object, condition: dict[str, Any]) -> None:
        meta = _meta(pod)
        await self.client.patch(
            PODS,
            str(meta["name"]),
            {"status": {"conditions": [condition]}},
            str(meta.get("namespace", "")),
            patch_type=STRATEGIC_MERGE_PATCH,
            subresource="status",
        )
