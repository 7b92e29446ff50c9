"""VirtualMachineInstance: the domain, the VMI spec (also a VM's template spec) and the VMI status."""

from __future__ import annotations

from pykubevirt.api.constants import DEFAULT_GRACE_PERIOD_SECONDS, KUBEVIRT_API_VERSION, VMI_KIND, VMI_PHASES
from pykubevirt.api.kubevirt import conditions, phase_transition_timestamps, uint32
from pykubevirt.api.kubevirt.compute import (
    CHASSIS,
    CLOCK,
    CPU,
    FEATURES,
    FIRMWARE,
    IO_THREADS,
    IO_THREADS_POLICY,
    LAUNCH_SECURITY,
    MACHINE,
    MEMORY,
    REBOOT_POLICY,
    RESOURCES,
)
from pykubevirt.api.kubevirt.devices import DEVICES
from pykubevirt.api.kubevirt.migration import MIGRATION_STATE
from pykubevirt.api.kubevirt.networks import INTERFACE_STATUS, NETWORKS
from pykubevirt.api.kubevirt.pod_shapes import (
    AFFINITY,
    DNS_CONFIG,
    DNS_POLICY,
    NODE_SELECTOR,
    PROBE,
    RESOURCE_CLAIMS,
    TOLERATIONS,
    TOPOLOGY_SPREAD_CONSTRAINTS,
)
from pykubevirt.api.kubevirt.volumes import (
    CHANGED_BLOCK_TRACKING_STATUS,
    MIGRATED_VOLUMES,
    UTILITY_VOLUMES,
    VOLUME_STATUS,
    VOLUMES,
)
from pykubevirt.api.schema import (
    Schema,
    array,
    describe,
    int64,
    integer,
    obj,
    quantity,
    string,
    string_map,
)

DOMAIN: Schema = obj(
    {
        "chassis": CHASSIS,
        "clock": CLOCK,
        "cpu": CPU,
        "devices": DEVICES,
        "features": FEATURES,
        "firmware": FIRMWARE,
        "ioThreads": IO_THREADS,
        "ioThreadsPolicy": IO_THREADS_POLICY,
        "launchSecurity": LAUNCH_SECURITY,
        "machine": MACHINE,
        "memory": MEMORY,
        "rebootPolicy": REBOOT_POLICY,
        "resources": RESOURCES,
    },
    "The virtual hardware of the guest: CPU, memory, firmware, features and devices.",
    required=["devices"],
)

_SECRET_SOURCE = obj(
    {
        "secret": obj(
            {"secretName": string("Name of the Secret in the VMI's namespace.")},
            "A Secret holding the credentials.",
            required=["secretName"],
        )
    },
    "Where the credentials come from.",
)

_QEMU_GUEST_AGENT_USERS = obj(
    {"users": array(string(), "Guest users whose authorized_keys are managed.", list_type="set")},
    "Propagate through the guest agent at runtime.",
    required=["users"],
)

ACCESS_CREDENTIALS: Schema = array(
    obj(
        {
            "sshPublicKey": obj(
                {
                    "propagationMethod": obj(
                        {
                            "configDrive": obj(description="Inject through the cloud-init ConfigDrive volume."),
                            "noCloud": obj(description="Inject through the cloud-init NoCloud volume."),
                            "qemuGuestAgent": _QEMU_GUEST_AGENT_USERS,
                        },
                        "How the keys reach the guest; exactly one method.",
                    ),
                    "source": _SECRET_SOURCE,
                },
                "SSH public keys injected into the guest.",
                required=["propagationMethod", "source"],
            ),
            "userPassword": obj(
                {
                    "propagationMethod": obj(
                        {"qemuGuestAgent": obj(description="Set the passwords through the guest agent.")},
                        "How the passwords reach the guest.",
                    ),
                    "source": _SECRET_SOURCE,
                },
                "User passwords set in the guest.",
                required=["propagationMethod", "source"],
            ),
        },
        "One credential source; exactly one type may be set.",
    ),
    "Credentials (SSH keys, passwords) propagated into the guest.",
    list_type="atomic",
    max_items=256,
)

VMI_SPEC: Schema = obj(
    {
        "accessCredentials": ACCESS_CREDENTIALS,
        "affinity": AFFINITY,
        "architecture": string("CPU architecture of the guest: amd64, arm64 or s390x; the cluster's by default."),
        "dnsConfig": DNS_CONFIG,
        "dnsPolicy": DNS_POLICY,
        "domain": DOMAIN,
        "evictionStrategy": string(
            "What a node drain does to the VMI: None, LiveMigrate, LiveMigrateIfPossible or External."
        ),
        "hostname": string("Guest host name; the VMI name by default."),
        "livenessProbe": describe(PROBE, "Restart the VMI when this check fails."),
        "networks": NETWORKS,
        "nodeSelector": NODE_SELECTOR,
        "priorityClassName": string("PriorityClass of the launcher pod."),
        "readinessProbe": describe(PROBE, "Mark the VMI not Ready while this check fails."),
        "resourceClaims": RESOURCE_CLAIMS,
        "schedulerName": string("Scheduler of the launcher pod; the default scheduler if empty."),
        "serviceAccountName": string("ServiceAccount the launcher pod runs as."),
        "startStrategy": string("Paused starts the guest paused; empty starts it running."),
        "subdomain": string("Subdomain of the guest's FQDN (<hostname>.<subdomain>.<namespace>.svc)."),
        "terminationGracePeriodSeconds": int64(
            f"Seconds a graceful shutdown may take before the guest is killed; {DEFAULT_GRACE_PERIOD_SECONDS} if unset."
        ),
        "tolerations": TOLERATIONS,
        "topologySpreadConstraints": TOPOLOGY_SPREAD_CONSTRAINTS,
        "utilityVolumes": UTILITY_VOLUMES,
        "volumes": VOLUMES,
    },
    "The desired guest: its domain, volumes, networks and scheduling.",
    required=["domain"],
)

_STATUS_MEMORY = obj(
    {
        "guestAtBoot": quantity("Guest memory when the guest booted."),
        "guestCurrent": quantity("Guest memory now."),
        "guestRequested": quantity("Guest memory asked for (memory hotplug)."),
        "memoryOverhead": quantity("Memory overhead of the launcher pod."),
    },
    "Guest memory sizes.",
)

_GUEST_OS_INFO = obj(
    {
        "id": string("OS id, e.g. fedora."),
        "kernelRelease": string("Kernel release."),
        "kernelVersion": string("Kernel version."),
        "machine": string("Machine hardware name."),
        "name": string("OS name."),
        "prettyName": string("Human-readable OS name and version."),
        "version": string("OS version."),
        "versionId": string("OS version id."),
    },
    "The guest OS as the guest agent reports it.",
)

_CHECKSUM = obj({"checksum": uint32("Checksum of the file.")})

VMI_STATUS: Schema = obj(
    {
        "VSOCKCID": uint32("Context id of the guest's vsock device."),
        "activePods": string_map("UIDs of the VMI's launcher pods mapped to their node names."),
        "changedBlockTracking": CHANGED_BLOCK_TRACKING_STATUS,
        "conditions": conditions("Conditions of the VMI: Ready, Paused, LiveMigratable, AgentConnected, …"),
        "currentCPUTopology": obj(
            {
                "cores": integer("Cores per socket."),
                "sockets": integer("Sockets."),
                "threads": integer("Threads per core."),
            },
            "CPU topology of the running guest.",
        ),
        "evacuationNodeName": string("Node the VMI is being evicted from."),
        "fsFreezeStatus": string("frozen while the guest filesystems are frozen."),
        "guestOSInfo": _GUEST_OS_INFO,
        "interfaces": INTERFACE_STATUS,
        "kernelBootStatus": obj(
            {
                "initrdInfo": describe(_CHECKSUM, "The initrd booted."),
                "kernelInfo": describe(_CHECKSUM, "The kernel booted."),
            },
            "What a kernel boot used.",
        ),
        "launcherContainerImageVersion": string("Image of the launcher's compute container."),
        "machine": obj({"type": string("Machine type in use.")}, "The emulated machine in use."),
        "memory": _STATUS_MEMORY,
        "migratedVolumes": MIGRATED_VOLUMES,
        "migrationMethod": string("BlockMigration or LiveMigration."),
        "migrationState": MIGRATION_STATE,
        "migrationTransport": string("How migration data travels: Unix."),
        "nodeName": string("Node the VMI runs on."),
        "phase": string(f"Lifecycle phase of the VMI: {', '.join(VMI_PHASES)}."),
        "phaseTransitionTimestamps": phase_transition_timestamps("When each VMI phase was entered."),
        "qosClass": string("QoS class of the launcher pod: Guaranteed, Burstable or BestEffort."),
        "reason": string("Brief reason for the VMI's state, e.g. NodeUnresponsive."),
        "runtimeUser": int64("User id QEMU runs as in the launcher; 107 when non-root."),
        "selinuxContext": string("SELinux context of the launcher."),
        "topologyHints": obj({"tscFrequency": int64("TSC frequency of the host in Hz.")}, "Host topology hints."),
        "virtualMachineRevisionName": string("ControllerRevision of the VM spec the VMI was started from."),
        "volumeStatus": VOLUME_STATUS,
    },
    "Observed state of the VMI, written by virt-controller and virt-handler.",
)

VIRTUAL_MACHINE_INSTANCE: Schema = obj(
    {
        "apiVersion": string(f"API version: {KUBEVIRT_API_VERSION}."),
        "kind": string(f"Kind: {VMI_KIND}."),
        "metadata": obj(),
        "spec": VMI_SPEC,
        "status": VMI_STATUS,
    },
    "A running virtual machine: one QEMU guest in a virt-launcher pod.",
    required=["spec"],
)
