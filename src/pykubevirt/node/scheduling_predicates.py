"""kube-scheduler's filters, least-allocated score and failure message, as pure functions over Pod and Node objects.

Filters run in kube-scheduler's default order and a node fails on the first filter that rejects it: NodeUnschedulable,
TaintToleration, node readiness, NodeAffinity (nodeSelector + required affinity), NodePorts, NodeResourcesFit; the
scheduler adds volume binding, PodTopologySpread (`node/topology_spread.py`) and InterPodAffinity
(`node/pod_affinity.py`) after them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api.node_selector_requirements import node_requirements_match
from pykubevirt.api.objects import condition
from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.node.node_scores import MAX_NODE_SCORE, min_max_normalized, scaled_to_max
from pykubevirt.node.pod_affinity import AffinityCheck
from pykubevirt.node.pod_status import TERMINAL_PHASES
from pykubevirt.node.topology_spread import SpreadCheck

Object = Mapping[str, Any]
Amounts = dict[str, int]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
# kube-scheduler's non-zero defaults for containers without a request, used only for scoring.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_NOT_READY = "node(s) were not ready"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_PORTS = "node(s) didn't have free ports for the requested pod ports"
ERR_TOO_MANY_PODS = "Too many pods"
NO_NODES_MESSAGE = "no nodes available to schedule pods"

# --------------------------------------------------------------------------------------------------- resources


def _amount(name: str, value: Any) -> int:
    """CPU in millicores, everything else in whole units, rounded up (Quantity.MilliValue / Value)."""
    try:
        quantity = Quantity.parse(value)
    except QuantityError:
        return 0
    return quantity.milli() if name == CPU else quantity.ceil_int()


def _amounts(values: Mapping[str, Any] | None) -> Amounts:
    return {str(name): _amount(str(name), value) for name, value in (values or {}).items()}


def _add(total: Amounts, more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max(total: Amounts, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > total.get(name, 0):
            total[name] = value


def container_requests(container: Object, *, non_zero: bool = False) -> Amounts:
    """A container's requests after API defaulting (a resource only in limits is requested at its limit); with
    `non_zero`, missing cpu and memory requests count as 100m and 200Mi (kube-scheduler's scoring defaults)."""
    resources = container.get("resources") or {}
    requests = {**_amounts(resources.get("limits")), **_amounts(resources.get("requests"))}
    if non_zero:
        requests.setdefault(CPU, DEFAULT_MILLI_CPU_REQUEST)
        requests.setdefault(MEMORY, DEFAULT_MEMORY_REQUEST)
    return requests


def pod_requests(pod: Object, *, non_zero: bool = False) -> Amounts:
    """The pod's effective request: containers summed, init containers max'ed (sidecars run alongside), + overhead."""
    spec = pod.get("spec") or {}
    total: Amounts = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container, non_zero=non_zero))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in spec.get("initContainers") or []:
        requests = container_requests(container, non_zero=non_zero)
        if container.get("restartPolicy") == "Always":
            # A restartable init container (sidecar) keeps running next to the app containers.
            _add(total, requests)
            _add(sidecars, requests)
            step = dict(sidecars)
        else:
            step = dict(requests)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    _add(total, _amounts(spec.get("overhead")))
    return total


def node_allocatable(node: Object) -> Amounts:
    """status.allocatable, or status.capacity for a node that reports no allocatable."""
    status = node.get("status") or {}
    return _amounts(status.get("allocatable") or status.get("capacity"))


def is_terminal(pod: Object) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def host_ports(pod: Object) -> set[tuple[str, str, int]]:
    """The (hostIP, protocol, hostPort) triples a pod claims on its node."""
    ports: set[tuple[str, str, int]] = set()
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                ip = str(port.get("hostIP") or "0.0.0.0")
                ports.add((ip, str(port.get("protocol") or "TCP"), int(port["hostPort"])))
    return ports


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod takes from its node: requests for fit, non-zero requests for scoring, host ports."""

    requests: Amounts
    non_zero: Amounts
    ports: frozenset[tuple[str, str, int]] = frozenset()

    @classmethod
    def of(cls, pod: Object) -> PodUsage:
        return cls(pod_requests(pod), pod_requests(pod, non_zero=True), frozenset(host_ports(pod)))


@dataclass(slots=True)
class NodeInfo:
    """A node with what the pods bound to it already request (kube-scheduler's NodeInfo)."""

    node: Object
    requested: Amounts = field(default_factory=dict)
    non_zero_requested: Amounts = field(default_factory=dict)
    pod_count: int = 0
    used_ports: set[tuple[str, str, int]] = field(default_factory=set)
    allocatable: Amounts = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.allocatable:
            self.allocatable = node_allocatable(self.node)

    @property
    def name(self) -> str:
        return str((self.node.get("metadata") or {}).get("name", ""))

    def add(self, usage: PodUsage) -> None:
        _add(self.requested, usage.requests)
        _add(self.non_zero_requested, usage.non_zero)
        self.pod_count += 1
        self.used_ports |= usage.ports


# --------------------------------------------------------------------------------------------------- taints


def tolerates(toleration: Object, taint: Object) -> bool:
    """core/v1 Toleration.ToleratesTaint: an empty key with operator Exists tolerates every taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return str(toleration.get("value") or "") == str(taint.get("value") or "")
    return False


def untolerated_taint(pod: Object, node: Object, effects: Sequence[str] = (NO_SCHEDULE, NO_EXECUTE)) -> Object | None:
    """The node's first NoSchedule/NoExecute taint none of the pod's tolerations tolerates."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            found: Object = taint
            return found
    return None


def taint_reason(taint: Object) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"


# --------------------------------------------------------------------------------------------------- node selection


def term_matches(term: Object, node: Object) -> bool:
    """One NodeSelectorTerm: matchExpressions on labels AND matchFields on metadata.name; an empty term is false."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    if node_requirements_match(expressions, labels) is not True:
        return False
    for expression in fields:
        if expression.get("key") != "metadata.name" or expression.get("operator") not in ("In", "NotIn"):
            return False
    return node_requirements_match(fields, {"metadata.name": str(meta.get("name", ""))}) is True


def node_selector_matches(selector: Object | None, node: Object) -> bool:
    """A NodeSelector: its terms are ORed."""
    if selector is None:
        return True
    return any(term_matches(term, node) for term in selector.get("nodeSelectorTerms") or [])


def matches_node_affinity(pod: Object, node: Object) -> bool:
    """The pod's nodeSelector and its required node affinity both match the node."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if key not in labels or str(labels[key]) != str(value):
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return node_selector_matches(required, node)


def is_ready(node: Object) -> bool:
    return (condition(node, "Ready") or {}).get("status") == "True"


def ports_conflict(wanted: Iterable[tuple[str, str, int]], used: Iterable[tuple[str, str, int]]) -> bool:
    """A host port clashes when protocol and port match and either side binds 0.0.0.0 or both bind the same IP."""
    used = list(used)
    for ip, protocol, port in wanted:
        for used_ip, used_protocol, used_port in used:
            if (port, protocol) == (used_port, used_protocol) and (ip == used_ip or "0.0.0.0" in (ip, used_ip)):
                return True
    return False


# --------------------------------------------------------------------------------------------------- fit


def insufficient_resources(request: Mapping[str, int], info: NodeInfo) -> list[str]:
    """NodeResourcesFit's reasons: `Too many pods`, then `Insufficient <resource>` per request that does not fit."""
    allocatable = info.allocatable
    reasons: list[str] = []
    if info.pod_count + 1 > allocatable.get(PODS, 0):
        reasons.append(ERR_TOO_MANY_PODS)
    free = {name: allocatable.get(name, 0) - info.requested.get(name, 0) for name in request}
    for name in (CPU, MEMORY, EPHEMERAL_STORAGE):
        if request.get(name, 0) > 0 and request[name] > free[name]:
            reasons.append(f"Insufficient {name}")
    for name in sorted(request):
        if name in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS) or request[name] == 0:
            continue
        if request[name] > free[name]:
            reasons.append(f"Insufficient {name}")
    return reasons


def filter_node(pod: Object, info: NodeInfo, usage: PodUsage | None = None) -> list[str]:
    """Why the pod cannot go to this node (empty when it can), from the first filter that rejects it."""
    node = info.node
    spec = pod.get("spec") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        cordon = {"key": UNSCHEDULABLE_TAINT, "effect": NO_SCHEDULE}
        if not any(tolerates(t, cordon) for t in spec.get("tolerations") or []):
            return [ERR_UNSCHEDULABLE]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [taint_reason(taint)]
    if not is_ready(node):
        return [ERR_NOT_READY]
    if not matches_node_affinity(pod, node):
        return [ERR_AFFINITY]
    usage = usage or PodUsage.of(pod)
    if usage.ports and ports_conflict(usage.ports, info.used_ports):
        return [ERR_PORTS]
    return insufficient_resources(usage.requests, info)


def _least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(usage: PodUsage, info: NodeInfo) -> int:
    """NodeResourcesFit LeastAllocated: the mean over cpu and memory of free share after placing the pod (0-100)."""
    allocatable = info.allocatable
    total = weights = 0
    for name in (CPU, MEMORY):
        capacity = allocatable.get(name, 0)
        if capacity == 0:
            continue
        requested = info.non_zero_requested.get(name, 0) + usage.non_zero.get(name, 0)
        total += _least_requested(requested, capacity)
        weights += 1
    return total // weights if weights else 0


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen node, or None with every node's reasons."""

    node: str | None
    reasons: dict[str, list[str]]
    scores: dict[str, int]


def preferred_node_affinity(pod: Object, node: Object) -> int:
    """NodeAffinity's score before normalizing: the weights of the preferred terms the node matches."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    preferred = (affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return sum(int(t.get("weight") or 0) for t in preferred if term_matches(t.get("preference") or {}, node))


def select_node(
    pod: Object,
    infos: Sequence[NodeInfo],
    usage: PodUsage | None = None,
    extra_filter: Callable[[NodeInfo], list[str]] | None = None,
    affinity: AffinityCheck | None = None,
    spread: SpreadCheck | None = None,
) -> Decision:
    """Filter every node (`extra_filter`, topology spread, then inter-pod affinity, after the built-in filters), then
    pick the highest score: least-allocated, plus twice the normalized preferred node affinity, topology spread and
    inter-pod affinity (kube's default plugin weights)."""
    usage = usage or PodUsage.of(pod)
    reasons: dict[str, list[str]] = {}
    feasible: list[NodeInfo] = []
    for info in infos:
        rejected = filter_node(pod, info, usage)
        if not rejected and extra_filter is not None:
            rejected = extra_filter(info)
        labels = (info.node.get("metadata") or {}).get("labels") or {}
        if not rejected and spread is not None:
            rejected = spread.reasons(labels)
        if not rejected and affinity is not None:
            rejected = affinity.reasons(labels)
        if rejected:
            reasons[info.name] = rejected
        else:
            feasible.append(info)
    scores = {info.name: least_allocated_score(usage, info) for info in feasible}
    if not scores:
        return Decision(None, reasons, scores)
    if len(scores) > 1:
        preferred = scaled_to_max({info.name: preferred_node_affinity(pod, info.node) for info in feasible})
        node_labels = {info.name: (info.node.get("metadata") or {}).get("labels") or {} for info in feasible}
        pods = dict.fromkeys(scores, 0)
        if affinity is not None:
            pods = min_max_normalized({name: affinity.raw_score(node_labels[name]) for name in scores})
        spreading = spread.scores(node_labels) if spread is not None else dict.fromkeys(scores, 0)
        scores = {
            name: score + 2 * preferred[name] + 2 * spreading[name] + 2 * pods[name] for name, score in scores.items()
        }
    best = min(scores, key=lambda name: (-scores[name], name))
    return Decision(best, reasons, scores)


def unschedulable_message(node_count: int, reasons: Mapping[str, Sequence[str]]) -> str:
    """framework.FitError's message: `0/N nodes are available: <count reason>, ….`, sorted as strings."""
    if node_count == 0:
        return NO_NODES_MESSAGE
    histogram: Counter[str] = Counter()
    for node_reasons in reasons.values():
        histogram.update(node_reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{node_count} nodes are available: {', '.join(parts)}."
