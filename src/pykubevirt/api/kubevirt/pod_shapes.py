"""Core-Kubernetes shapes a VMI spec embeds: scheduling (affinity, tolerations, spread), DNS, probes, claims.

They follow the Kubernetes core/v1 schemas exactly, since virt-controller copies them onto the launcher pod.
"""

from __future__ import annotations

from pykubevirt.api.kubevirt import atomic
from pykubevirt.api.schema import (
    Schema,
    array,
    describe,
    int64,
    int_or_string,
    integer,
    label_selector,
    obj,
    string,
    string_map,
)


def _atomic_strings(description: str = "") -> Schema:
    return array(string(), description, list_type="atomic")


def _label_selector() -> Schema:
    node = atomic(label_selector("Selects objects by their labels; an empty selector matches all."))
    fields = node["properties"]
    fields["matchLabels"]["description"] = "Labels that must all match exactly."
    fields["matchExpressions"]["description"] = "Label requirements that must all hold."
    requirement = fields["matchExpressions"]["items"]["properties"]
    requirement["key"]["description"] = "The label key."
    requirement["operator"]["description"] = "In, NotIn, Exists or DoesNotExist."
    requirement["values"]["description"] = "Values for In and NotIn; empty for Exists and DoesNotExist."
    return node


LABEL_SELECTOR: Schema = _label_selector()

NODE_SELECTOR: Schema = string_map("Labels a node must carry for the VMI to be scheduled there.")

# Affinity.

_NODE_SELECTOR_REQUIREMENT = obj(
    {
        "key": string("The label or field key."),
        "operator": string("In, NotIn, Exists, DoesNotExist, Gt or Lt."),
        "values": _atomic_strings("Values compared with the key's value."),
    },
    required=["key", "operator"],
)

NODE_SELECTOR_TERM: Schema = atomic(
    obj(
        {
            "matchExpressions": array(_NODE_SELECTOR_REQUIREMENT, "Requirements on node labels.", list_type="atomic"),
            "matchFields": array(_NODE_SELECTOR_REQUIREMENT, "Requirements on node fields.", list_type="atomic"),
        },
        "Requirements a node must meet; all of them (AND).",
    )
)

NODE_AFFINITY: Schema = obj(
    {
        "preferredDuringSchedulingIgnoredDuringExecution": array(
            obj(
                {
                    "preference": NODE_SELECTOR_TERM,
                    "weight": integer("Weight 1-100 added to a node that matches."),
                },
                required=["preference", "weight"],
            ),
            "Node terms the scheduler prefers, by weight.",
            list_type="atomic",
        ),
        "requiredDuringSchedulingIgnoredDuringExecution": atomic(
            obj(
                {
                    "nodeSelectorTerms": array(
                        NODE_SELECTOR_TERM, "Terms of which at least one must match (OR).", list_type="atomic"
                    )
                },
                "Node terms that must match for scheduling.",
                required=["nodeSelectorTerms"],
            )
        ),
    },
    "Node affinity scheduling rules.",
)

POD_AFFINITY_TERM: Schema = obj(
    {
        "labelSelector": describe(LABEL_SELECTOR, "The pods the term refers to, by labels."),
        "matchLabelKeys": _atomic_strings("Pod label keys whose values are added to labelSelector as In."),
        "mismatchLabelKeys": _atomic_strings("Pod label keys whose values are added to labelSelector as NotIn."),
        "namespaceSelector": describe(LABEL_SELECTOR, "Namespaces the term applies to, by labels."),
        "namespaces": _atomic_strings("Namespaces the term applies to."),
        "topologyKey": string("Node label whose equal values form one topology domain."),
    },
    "Pods (by labels and namespaces) to be co-located with, per topology domain.",
    required=["topologyKey"],
)

_WEIGHTED_POD_AFFINITY_TERM = obj(
    {"podAffinityTerm": POD_AFFINITY_TERM, "weight": integer("Weight 1-100 added when the term matches.")},
    required=["podAffinityTerm", "weight"],
)


def _pod_affinity(description: str) -> Schema:
    return obj(
        {
            "preferredDuringSchedulingIgnoredDuringExecution": array(
                _WEIGHTED_POD_AFFINITY_TERM, "Terms the scheduler prefers, by weight.", list_type="atomic"
            ),
            "requiredDuringSchedulingIgnoredDuringExecution": array(
                POD_AFFINITY_TERM, "Terms that must all hold for scheduling.", list_type="atomic"
            ),
        },
        description,
    )


AFFINITY: Schema = obj(
    {
        "nodeAffinity": NODE_AFFINITY,
        "podAffinity": _pod_affinity("Rules placing the VMI near other pods."),
        "podAntiAffinity": _pod_affinity("Rules keeping the VMI away from other pods."),
    },
    "Scheduling constraints (node, pod affinity and anti-affinity) passed to the launcher pod.",
)

TOLERATIONS: Schema = array(
    obj(
        {
            "effect": string("Taint effect matched: NoSchedule, PreferNoSchedule or NoExecute; empty matches all."),
            "key": string("Taint key matched; empty with operator Exists matches all taints."),
            "operator": string("Exists or Equal (default)."),
            "tolerationSeconds": int64("How long a NoExecute taint is tolerated before eviction."),
            "value": string("Taint value matched with operator Equal."),
        }
    ),
    "Taints the launcher pod tolerates.",
)

TOPOLOGY_SPREAD_CONSTRAINTS: Schema = array(
    obj(
        {
            "labelSelector": describe(LABEL_SELECTOR, "The pods counted when spreading, by labels."),
            "matchLabelKeys": _atomic_strings("Pod label keys whose values narrow the spreading selection."),
            "maxSkew": integer("Largest allowed difference of matching pods between domains."),
            "minDomains": integer("Minimum number of eligible domains."),
            "nodeAffinityPolicy": string("Honor or Ignore node affinity when computing skew."),
            "nodeTaintsPolicy": string("Honor or Ignore node taints when computing skew."),
            "topologyKey": string("Node label whose values form the domains."),
            "whenUnsatisfiable": string("DoNotSchedule or ScheduleAnyway."),
        },
        required=["maxSkew", "topologyKey", "whenUnsatisfiable"],
    ),
    "How the VMI's pods spread across topology domains.",
    list_type="map",
    list_map_keys=["topologyKey", "whenUnsatisfiable"],
)

RESOURCE_CLAIMS: Schema = array(
    obj(
        {
            "name": string("Name the claim is referenced by inside the VMI."),
            "resourceClaimName": string("An existing ResourceClaim in the namespace."),
            "resourceClaimTemplateName": string("A ResourceClaimTemplate a claim is created from."),
        },
        required=["name"],
    ),
    "Dynamic resource allocation claims the VMI uses (DRA).",
    list_type="map",
    list_map_keys=["name"],
)

DNS_CONFIG: Schema = obj(
    {
        "nameservers": _atomic_strings("DNS server addresses (at most 3)."),
        "options": array(
            obj({"name": string("Resolver option name."), "value": string("Resolver option value.")}),
            "Resolver options.",
            list_type="atomic",
        ),
        "searches": _atomic_strings("DNS search domains."),
    },
    "DNS parameters merged into those generated from dnsPolicy.",
)

DNS_POLICY = string("DNS policy: ClusterFirstWithHostNet, ClusterFirst (default), Default or None.")

# Probes.

_HTTP_GET = obj(
    {
        "host": string("Host name to connect to; the VMI IP by default."),
        "httpHeaders": array(
            obj({"name": string("Header name."), "value": string("Header value.")}, required=["name", "value"]),
            "Custom request headers.",
            list_type="atomic",
        ),
        "path": string("Path to request."),
        "port": int_or_string("Port number or name."),
        "scheme": string("HTTP (default) or HTTPS."),
    },
    "Probe with an HTTP GET request.",
    required=["port"],
)

_TCP_SOCKET = obj(
    {"host": string("Host name to connect to; the VMI IP by default."), "port": int_or_string("Port number or name.")},
    "Probe by opening a TCP connection.",
    required=["port"],
)

PROBE: Schema = obj(
    {
        "exec": obj(
            {"command": array(string(), "Command run in the guest via the guest agent.", list_type="atomic")},
            "Probe by running a command in the guest (needs the guest agent).",
        ),
        "failureThreshold": integer("Consecutive failures after which the probe counts as failed."),
        "guestAgentPing": obj(description="Probe by pinging the guest agent."),
        "httpGet": _HTTP_GET,
        "initialDelaySeconds": integer("Seconds after start before the first probe."),
        "periodSeconds": integer("Seconds between probes."),
        "successThreshold": integer("Consecutive successes after a failure needed to count as succeeded."),
        "tcpSocket": _TCP_SOCKET,
        "timeoutSeconds": integer("Seconds before a probe times out."),
    },
    "A health check of the guest; exactly one probe type may be set.",
)
