"""KubeVirt: the cluster's KubeVirt installation, whose spec.configuration every component reads.

Upstream `staging/src/kubevirt.io/api/core/v1/types.go: KubeVirt, KubeVirtConfiguration`. Only the configuration
the components act on is typed; the rest of the spec and the operator's status are kept as given.
"""

from __future__ import annotations

from pykubevirt.api.constants import KUBEVIRT_API_VERSION, KUBEVIRT_KIND
from pykubevirt.api.kubevirt import conditions
from pykubevirt.api.kubevirt.migration import MIGRATION_CONFIGURATION
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    free_form,
    integer,
    label_selector,
    obj,
    quantity,
    string,
)


def _strings(description: str) -> Schema:
    return array(string(), description)


_DEVELOPER_CONFIGURATION = obj(
    {
        "featureGates": _strings("Feature gates to enable."),
        "disabledFeatureGates": _strings("Feature gates to disable (Beta gates are on unless listed here)."),
        "memoryOvercommit": integer("Percent of the pod's memory the guest sees (100: no overcommit)."),
        "cpuAllocationRatio": integer("Virtual CPUs per physical CPU requested for the launcher pod."),
    },
    "Experimental and developer settings.",
    preserve_unknown=True,
)

_NETWORK_CONFIGURATION = obj(
    {
        "defaultNetworkInterface": string("Binding of the pod network when a VMI names none."),
        "permitBridgeInterfaceOnPodNetwork": boolean("Allow the bridge binding on the pod network."),
        "permitSlirpInterface": boolean("Allow the slirp binding."),
    },
    "Network defaults.",
    preserve_unknown=True,
)

_LIVE_UPDATE_CONFIGURATION = obj(
    {
        "maxHotplugRatio": integer("How many times the start size CPU and memory may grow by hotplug."),
        "maxCpuSockets": integer("Most CPU sockets a VM may have."),
        "maxGuest": quantity("Most memory a VM may have."),
    },
    "Limits of live updates.",
)

_CONFIGURATION = obj(
    {
        "developerConfiguration": _DEVELOPER_CONFIGURATION,
        "network": _NETWORK_CONFIGURATION,
        "migrations": MIGRATION_CONFIGURATION,
        "evictionStrategy": string("Eviction strategy of VMIs that set none."),
        "vmRolloutStrategy": string("How VM spec changes reach a running VMI: LiveUpdate or Stage."),
        "liveUpdateConfiguration": _LIVE_UPDATE_CONFIGURATION,
        "cpuModel": string("CPU model of VMIs that set none."),
        "cpuRequest": quantity("CPU request of the launcher pod per VMI."),
        "memBalloonStatsPeriod": integer("Seconds between balloon statistics; 0 disables them."),
        "emulatedMachines": _strings("Machine types a VMI may ask for (globs)."),
        "smbios": obj(
            {name: string() for name in ("family", "manufacturer", "product", "sku", "version")},
            "SMBIOS system identity the guests see.",
            preserve_unknown=True,
        ),
        "virtualMachineOptions": obj(
            {"disableSerialConsoleLog": free_form("Set (an empty object): no guest-console-log container.")},
            "Defaults of every VM.",
            preserve_unknown=True,
        ),
        "architectureConfiguration": free_form("Per-architecture machine types and firmware."),
        "ksmConfiguration": obj(
            {"nodeLabelSelector": label_selector("The nodes whose virt-handler runs KSM; empty selects all.")},
            "Kernel samepage merging on the nodes.",
        ),
    },
    "The cluster's configuration.",
    preserve_unknown=True,
)

KUBEVIRT: Schema = obj(
    {
        "apiVersion": string(f"API version: {KUBEVIRT_API_VERSION}."),
        "kind": string(f"Kind: {KUBEVIRT_KIND}."),
        "metadata": obj(),
        "spec": obj(
            {"configuration": _CONFIGURATION}, "The installation and its configuration.", preserve_unknown=True
        ),
        "status": obj(
            {
                "phase": string("Where the installation stands."),
                "conditions": conditions("The installation's conditions."),
                "generations": array(free_form(), "Generations of what the operator deployed."),
            },
            "The operator's status.",
            preserve_unknown=True,
        ),
    },
    "KubeVirt represents the object deploying all KubeVirt resources.",
    required=("spec",),
)
