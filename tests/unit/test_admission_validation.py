"""Table tests for KubeVirt's validating admission: one passing and one failing input per message.

Upstream: pkg/virt-api/webhooks/validating-webhook/admitters/ (vms-admitter.go, vmi-create-admitter.go).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation import (
    REQUEST_ERROR,
    validate_datavolume,
    validate_instancetype,
    validate_migration_create,
    validate_preference,
    validate_vm,
    validate_vmi_create,
    validate_vmi_spec,
    validate_vmi_update,
)
from pykubevirt.api.causes import Cause, FieldPath
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.instancetype.conflicts import instancetype_conflicts
from tests.support.object_lookup import DictLookup, ObjectKey

INV, REQ, NSUP, DUP, NFOUND, FORB = (
    "FieldValueInvalid",
    "FieldValueRequired",
    "FieldValueNotSupported",
    "FieldValueDuplicate",
    "FieldValueNotFound",
    "FieldValueForbidden",
)
CTX = AdmissionContext()
KUBEVIRT_SA = "system:serviceaccount:kubevirt:kubevirt-controller"
DNS_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

# A defaulted VMI spec that passes every rule; each case edits a copy.
BASE: dict[str, Any] = {
    "architecture": "amd64",
    "domain": {
        "machine": {"type": "q35"},
        "cpu": {"sockets": 1, "cores": 1, "threads": 1},
        "memory": {"guest": "128Mi"},
        "devices": {
            "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}],
            "interfaces": [{"name": "default", "masquerade": {}}],
        },
    },
    "networks": [{"name": "default", "pod": {}}],
    "volumes": [{"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}],
}
DELETE = object()


def _set(obj: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        obj = obj[int(key)] if isinstance(obj, list) else obj.setdefault(key, {})
    last = keys[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    elif value is DELETE:
        obj.pop(last, None)
    else:
        obj[last] = value


def S(*edits: tuple[str, Any]) -> dict[str, Any]:
    """BASE with (dotted.path, value) edits applied; list items are addressed by number."""
    spec = copy.deepcopy(BASE)
    for path, value in edits:
        _set(spec, path, value)
    return spec


def add_volume(name: str, source: dict[str, Any], disk: dict[str, Any] | None = None) -> tuple[tuple[str, Any], ...]:
    disks = [*BASE["domain"]["devices"]["disks"], {"name": name, **(disk or {"disk": {"bus": "virtio"}})}]
    volumes = [*BASE["volumes"], {"name": name, **source}]
    return (("domain.devices.disks", disks), ("volumes", volumes))


def ifaces(*items: dict[str, Any]) -> tuple[str, Any]:
    return ("domain.devices.interfaces", list(items))


def nets(*items: dict[str, Any]) -> tuple[str, Any]:
    return ("networks", list(items))


def C(kind: str, field: str, message: str) -> Cause:
    return Cause(kind, message, field)


def cfg(**kwargs: Any) -> AdmissionContext:
    return AdmissionContext(config=ClusterConfig(**kwargs))


DISKS = "spec.domain.devices.disks"
IFACES = "spec.domain.devices.interfaces"
MULTUS = {"name": "net1", "multus": {"networkName": "net1"}}

# (id, spec, ctx, expected causes); an empty list means the spec passes.
SPEC_CASES: list[tuple[str, dict[str, Any], AdmissionContext, list[Cause]]] = [
    ("base passes", S(), CTX, []),
    # Rule 8 (VM/VMI shared half): a disk needs a volume.
    (
        "disk without volume",
        S(("domain.devices.disks", [*BASE["domain"]["devices"]["disks"], {"name": "data", "disk": {}}])),
        CTX,
        [C(INV, f"{DISKS}[1].name", f"{DISKS}[1].Name 'data' not found.")],
    ),
    (
        "cdrom without volume is allowed (DeclarativeHotplugVolumes is Beta)",
        S(("domain.devices.disks", [*BASE["domain"]["devices"]["disks"], {"name": "cd", "cdrom": {"bus": "sata"}}])),
        CTX,
        [],
    ),
    # Rule 9.
    (
        "duplicate disk names",
        S(("domain.devices.disks", [{"name": "rootdisk", "disk": {}}, {"name": "rootdisk", "disk": {}}])),
        CTX,
        [C(INV, f"{DISKS}[1].name", f"{DISKS}[1] and {DISKS}[0] must not have the same Name.")],
    ),
    (
        "duplicate volume names",
        S(("volumes", [BASE["volumes"][0], BASE["volumes"][0]])),
        CTX,
        [C(INV, "spec.volumes[1].name", "spec.volumes[1] and spec.volumes[0] must not have the same Name.")],
    ),
    (
        "two disk targets",
        S(("domain.devices.disks.0", {"name": "rootdisk", "disk": {}, "cdrom": {}})),
        CTX,
        [C(INV, f"{DISKS}[0]", f"{DISKS}[0] can only have a single target type defined")],
    ),
    # Rule 10.
    (
        "ide bus",
        S(("domain.devices.disks.0.disk.bus", "ide")),
        CTX,
        [C(INV, f"{DISKS}[0].disk.bus", "IDE bus is not supported")],
    ),
    ("scsi bus passes", S(("domain.devices.disks.0.disk.bus", "scsi")), CTX, []),
    (
        "virtio cdrom",
        S(("domain.devices.disks.0", {"name": "rootdisk", "cdrom": {"bus": "virtio"}})),
        CTX,
        [C(INV, f"{DISKS}[0].cdrom.bus", "Bus type virtio is invalid for CD-ROM device")],
    ),
    (
        "sata cdrom passes",
        S(("domain.devices.disks.0", {"name": "rootdisk", "cdrom": {"bus": "sata", "readonly": True}})),
        CTX,
        [],
    ),
    (
        "read-only sata disk",
        S(("domain.devices.disks.0.disk", {"bus": "sata", "readonly": True})),
        CTX,
        [C(INV, f"{DISKS}[0].disk.bus", "sata hard-disks do not support read-only.")],
    ),
    (
        "unknown bus",
        S(("domain.devices.disks.0.disk.bus", "floppy")),
        CTX,
        [
            C(
                INV,
                f"{DISKS}[0].disk.bus",
                f"{DISKS}[0] is set with an unrecognized bus floppy, must be one of: [virtio scsi sata usb]",
            )
        ],
    ),
    (
        "iothread on sata",
        S(("domain.devices.disks.0", {"name": "rootdisk", "disk": {"bus": "sata"}, "dedicatedIOThread": True})),
        CTX,
        [C(NSUP, f"{DISKS}.domain.devices.disks[0]", "IOThreads are not supported for disks on a sata bus")],
    ),
    ("iothread on virtio passes", S(("domain.devices.disks.0.dedicatedIOThread", True)), CTX, []),
    # Rule 11.
    (
        "boot order zero",
        S(("domain.devices.disks.0.bootOrder", 0)),
        CTX,
        [C(INV, f"{DISKS}[0].bootOrder", f"{DISKS}[0] must have a boot order > 0, if supplied")],
    ),
    (
        "boot order reused by an interface",
        S(("domain.devices.disks.0.bootOrder", 1), ("domain.devices.interfaces.0.bootOrder", 1)),
        CTX,
        [C(INV, f"{IFACES}[0].bootOrder", f"Boot order for {IFACES}[0].bootOrder already set for a different device.")],
    ),
    (
        "distinct boot orders pass",
        S(("domain.devices.disks.0.bootOrder", 2), ("domain.devices.interfaces.0.bootOrder", 1)),
        CTX,
        [],
    ),
    # Rule 12.
    (
        "disk name not a DNS label",
        S(("domain.devices.disks.0.name", "Root_Disk"), ("volumes.0.name", "Root_Disk")),
        CTX,
        [C(INV, f"{DISKS}.domain.devices.disks[0].name", DNS_LABEL_ERR)],
    ),
    (
        "disk serial characters",
        S(("domain.devices.disks.0.serial", "abc/def")),
        CTX,
        [
            C(
                INV,
                f"{DISKS}[0].serial",
                f"{DISKS}[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified",
            )
        ],
    ),
    (
        "disk serial length",
        S(("domain.devices.disks.0.serial", "a" * 257)),
        CTX,
        [C(INV, f"{DISKS}[0].serial", f"{DISKS}[0] must be less than or equal to 256 in length, if specified")],
    ),
    ("disk serial passes", S(("domain.devices.disks.0.serial", "SN-0001_a.b+c")), CTX, []),
    # Rule 13 and the cache/errorPolicy values beyond the reference.
    (
        "cache unsafe",
        S(("domain.devices.disks.0.cache", "unsafe")),
        CTX,
        [C(INV, f"{DISKS}[0].cache", f"{DISKS}[0].cache has invalid value unsafe")],
    ),
    ("cache writeback passes", S(("domain.devices.disks.0.cache", "writeback")), CTX, []),
    ("cache writethrough passes", S(("domain.devices.disks.0.cache", "writethrough")), CTX, []),
    (
        "io mode",
        S(("domain.devices.disks.0.io", "io_uring")),
        CTX,
        [
            C(
                NSUP,
                f"{DISKS}.domain.devices.disks[0].io",
                f"Disk IO mode for {DISKS} is not supported. Supported modes are: native, threads.",
            )
        ],
    ),
    ("io native passes", S(("domain.devices.disks.0.io", "native")), CTX, []),
    (
        "error policy",
        S(("domain.devices.disks.0.errorPolicy", "panic")),
        CTX,
        [C(INV, f"{DISKS}[0].errorPolicy", f'{DISKS}[0].errorPolicy has invalid value "panic"')],
    ),
    ("error policy enospace passes", S(("domain.devices.disks.0.errorPolicy", "enospace")), CTX, []),
    (
        "lun on a containerDisk",
        S(("domain.devices.disks.0", {"name": "rootdisk", "lun": {"bus": "scsi"}})),
        CTX,
        [
            C(
                INV,
                f"{DISKS}[0].lun",
                f"{DISKS}[0].lun can only be mapped to a DataVolume or PersistentVolumeClaim volume.",
            )
        ],
    ),
    (
        "lun on a pvc passes",
        S(*add_volume("shared", {"persistentVolumeClaim": {"claimName": "shared"}}, {"lun": {"bus": "scsi"}})),
        CTX,
        [],
    ),
    # Rule 15.
    (
        "negative memory request",
        S(("domain.resources", {"requests": {"memory": "-1Gi"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory '-1Gi': must be greater than or equal to 0.",
            )
        ],
    ),
    (
        "memory request below 1M",
        S(("domain.resources", {"requests": {"memory": "1k"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory '1k': must be greater than or equal to 1M.",
            )
        ],
    ),
    (
        "negative memory limit",
        S(("domain.resources", {"limits": {"memory": "-2Gi"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.limits.memory",
                "spec.domain.resources.limits.memory '-2Gi': must be greater than or equal to 0.",
            )
        ],
    ),
    (
        "memory request above limit",
        S(("domain.resources", {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory '2Gi' is greater than spec.domain.resources.limits.memory '1Gi'",
            )
        ],
    ),
    (
        "memory request equal to limit passes",
        S(("domain.resources", {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}})),
        CTX,
        [],
    ),
    (
        "negative cpu request",
        S(("domain.resources", {"requests": {"cpu": "-1"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.cpu",
                "spec.domain.resources.requests.cpu '-1': must be greater than or equal to 0.",
            )
        ],
    ),
    (
        "negative cpu limit",
        S(("domain.resources", {"limits": {"cpu": "-500m"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.limits.cpu",
                "spec.domain.resources.limits.cpu '-500m': must be greater than or equal to 0.",
            )
        ],
    ),
    (
        "cpu request above limit",
        S(("domain.resources", {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.cpu",
                "spec.domain.resources.requests.cpu '2' is greater than spec.domain.resources.limits.cpu '1500m'",
            )
        ],
    ),
    (
        "cpu request below limit passes",
        S(("domain.resources", {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}})),
        CTX,
        [],
    ),
    # Rule 16 (only without LiveUpdate).
    (
        "guest above memory limit",
        S(("domain.memory.guest", "2Gi"), ("domain.resources", {"limits": {"memory": "1Gi"}})),
        cfg(vm_rollout_strategy="Stage"),
        [
            C(
                INV,
                "spec.domain.memory.guest",
                "spec.domain.memory.guest '2Gi' must be equal to or less than "
                "the memory limit spec.domain.resources.limits.memory '1Gi'",
            )
        ],
    ),
    (
        "guest above limit passes with LiveUpdate",
        S(("domain.memory.guest", "2Gi"), ("domain.resources", {"limits": {"memory": "1Gi"}})),
        CTX,
        [],
    ),
    # Rule 17.
    (
        "memory not a multiple of the hugepage size",
        S(
            ("domain.memory", {"hugepages": {"pageSize": "10Mi"}}),
            ("domain.resources", {"requests": {"memory": "64Mi"}}),
        ),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory '64Mi' is not a multiple "
                "of the page size spec.domain.memory.hugepages.pageSize '10Mi'",
            )
        ],
    ),
    (
        "memory below the hugepage size",
        S(("domain.memory", {"hugepages": {"pageSize": "2Mi"}}), ("domain.resources", {"requests": {"memory": "1Mi"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory '1Mi' must be equal to or "
                "larger than page size spec.domain.memory.hugepages.pageSize '2Mi'",
            )
        ],
    ),
    ("2Mi hugepages pass", S(("domain.memory", {"guest": "16Gi", "hugepages": {"pageSize": "2Mi"}})), CTX, []),
    # Rule 18.
    (
        "machine type not emulated",
        S(("domain.machine.type", "pc-i440fx-rhel7.6.0")),
        CTX,
        [
            C(
                INV,
                "spec.domain.machine.type",
                "spec.domain.machine.type is not supported: pc-i440fx-rhel7.6.0 (allowed values: [q35* pc-q35*])",
            )
        ],
    ),
    ("machine type pc-q35 passes", S(("domain.machine.type", "pc-q35-rhel8.6.0")), CTX, []),
    # Rule 19.
    (
        "hostname not a DNS label",
        S(("hostname", "Bad_Host")),
        CTX,
        [
            C(
                INV,
                "spec.hostname",
                f"spec.hostname does not conform to the kubernetes DNS_LABEL rules : {DNS_LABEL_ERR}",
            )
        ],
    ),
    (
        "hostname with dots",
        S(("hostname", "my.host")),
        CTX,
        [
            C(
                INV,
                "spec.hostname",
                "spec.hostname does not conform to the kubernetes DNS_LABEL rules : must not contain dots",
            )
        ],
    ),
    (
        "subdomain not a DNS subdomain",
        S(("subdomain", "Bad_Sub")),
        CTX,
        [
            C(
                INV,
                "spec.subdomain",
                f"spec.subdomain does not conform to the kubernetes DNS_SUBDOMAIN rules : {DNS_SUBDOMAIN_ERR}",
            )
        ],
    ),
    ("hostname and subdomain pass", S(("hostname", "my-vm"), ("subdomain", "my.sub")), CTX, []),
    # Rule 20.
    (
        "dedicated cpu request differs from limit",
        S(
            ("domain.cpu", {"dedicatedCpuPlacement": True}),
            ("domain.resources", {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}}),
        ),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.dedicatedCpuPlacement",
                "spec.domain.resources.requests.cpu or spec.domain.resources.limits.cpu "
                "must be equal when DedicatedCPUPlacement is true ",
            )
        ],
    ),
    (
        "dedicated cpu request not an integer",
        S(("domain.cpu", {"dedicatedCpuPlacement": True}), ("domain.resources", {"requests": {"cpu": "1500m"}})),
        CTX,
        [C(INV, "spec.domain.resources.requests.cpu", "provided resources CPU requests must be an interger")],
    ),
    (
        "dedicated cpu limit not an integer",
        S(("domain.cpu", {"dedicatedCpuPlacement": True}), ("domain.resources", {"limits": {"cpu": "2500m"}})),
        CTX,
        [C(INV, "spec.domain.resources.limits.cpu", "provided resources CPU limits must be an interger")],
    ),
    (
        "dedicated cpu with three threads",
        S(("domain.cpu", {"dedicatedCpuPlacement": True, "threads": 3})),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.dedicatedCpuPlacement",
                "Not more than two threads must be provided at "
                "spec.domain.cpu.threads (got 3) when DedicatedCPUPlacement is true",
            )
        ],
    ),
    (
        "dedicated cpu without any cpu count",
        S(("domain.cpu", {"dedicatedCpuPlacement": True})),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.dedicatedCpuPlacement",
                "either spec.domain.resources.requests.cpu or "
                "spec.domain.resources.limits.cpu or spec.domain.cpu.cores "
                "must be provided when DedicatedCPUPlacement is true ",
            )
        ],
    ),
    (
        "dedicated cpu request clashes with cores",
        S(
            ("domain.cpu", {"dedicatedCpuPlacement": True, "cores": 2}),
            ("domain.resources", {"requests": {"cpu": "4"}}),
        ),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.dedicatedCpuPlacement",
                "spec.domain.resources.requests.cpu or "
                "spec.domain.resources.limits.cpu must not be provided at the same "
                "time with spec.domain.cpu.cores when DedicatedCPUPlacement is true ",
            )
        ],
    ),
    (
        "dedicated cpu without memory",
        S(("domain.cpu", {"dedicatedCpuPlacement": True, "cores": 2}), ("domain.memory", DELETE)),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.limits.memory",
                "spec.domain.resources.requests.memory, "
                "spec.domain.resources.limits.memory, spec.domain.memory.hugepages "
                "or spec.domain.memory.guest should be provided",
            )
        ],
    ),
    (
        "dedicated cpu memory request differs from limit",
        S(
            ("domain.cpu", {"dedicatedCpuPlacement": True, "cores": 2}),
            ("domain.resources", {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
        ),
        CTX,
        [
            C(
                INV,
                "spec.domain.resources.requests.memory",
                "spec.domain.resources.requests.memory must be equal to spec.domain.resources.limits.memory",
            )
        ],
    ),
    (
        "dedicated cpu with cores passes",
        S(("domain.cpu", {"dedicatedCpuPlacement": True, "cores": 2, "isolateEmulatorThread": True})),
        CTX,
        [],
    ),
    (
        "isolated emulator thread without dedicated cpus",
        S(("domain.cpu.isolateEmulatorThread", True)),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.isolateEmulatorThread",
                "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
            )
        ],
    ),
    # Rule 21.
    (
        "cpu feature policy",
        S(("domain.cpu.features", [{"name": "vmx", "policy": "maybe"}])),
        CTX,
        [C(NSUP, "spec.domain.cpu.features[0].policy", "CPU feature vmx uses policy maybe that is not supported.")],
    ),
    (
        "cpu feature policy require passes",
        S(("domain.cpu.features", [{"name": "vmx", "policy": "require"}, {"name": "pcid"}])),
        CTX,
        [],
    ),
    # Rule 22.
    (
        "start strategy",
        S(("startStrategy", "Later")),
        CTX,
        [C(INV, "spec.startStrategy", "spec.startStrategy is set with an unrecognized option: Later")],
    ),
    (
        "paused start with a liveness probe",
        S(("startStrategy", "Paused"), ("livenessProbe", {"guestAgentPing": {}})),
        CTX,
        [
            C(
                INV,
                "spec.startStrategy",
                "either spec.startStrategy or spec.livenessProbe should be "
                "provided.Pausing VMI with LivenessProbe is not supported",
            )
        ],
    ),
    ("paused start passes", S(("startStrategy", "Paused")), CTX, []),
    (
        "eviction strategy",
        S(("evictionStrategy", "fantasy")),
        CTX,
        [C(INV, "spec.evictionStrategy", "spec.evictionStrategy is set with an unrecognized option: fantasy")],
    ),
    ("eviction strategy LiveMigrate passes", S(("evictionStrategy", "LiveMigrate")), CTX, []),
    # Rule 23.
    (
        "probe with two handlers",
        S(("readinessProbe", {"httpGet": {"port": 80}, "tcpSocket": {"port": 80}})),
        CTX,
        [C(INV, "spec.readinessProbe", "spec.readinessProbe must have exactly one probe type set")],
    ),
    (
        "probe without handler",
        S(("livenessProbe", {"initialDelaySeconds": 5})),
        CTX,
        [
            C(
                REQ,
                "spec.livenessProbe",
                "either spec.livenessProbe.tcpSocket, spec.livenessProbe.exec "
                "or spec.livenessProbe.httpGet must be set "
                "if a spec.livenessProbe is specified",
            )
        ],
    ),
    (
        "http probe without pod network",
        S(ifaces(), nets(), ("readinessProbe", {"httpGet": {"port": 80}})),
        CTX,
        [
            C(
                INV,
                "spec.readinessProbe.httpGet",
                "spec.readinessProbe.httpGet is only allowed if the Pod Network is attached",
            )
        ],
    ),
    (
        "exec probe without pod network passes",
        S(ifaces(), nets(), ("readinessProbe", {"exec": {"command": ["true"]}})),
        CTX,
        [],
    ),
    # Rule 24.
    (
        "volume with two sources",
        S(("volumes.0.emptyDisk", {"capacity": "1Gi"})),
        CTX,
        [C(INV, "spec.volumes[0]", "spec.volumes[0] must have exactly one source type set")],
    ),
    (
        "data volume without a name",
        S(*add_volume("dv", {"dataVolume": {}})),
        CTX,
        [C(REQ, "spec.volumes[1].name", "DataVolume 'name' must be set")],
    ),
    (
        "config map without a name",
        S(*add_volume("cm", {"configMap": {}})),
        CTX,
        [C(INV, "spec.volumes[1].configMap.name", "spec.volumes[1].configMap.name is a required field")],
    ),
    (
        "secret without a name",
        S(*add_volume("sec", {"secret": {}})),
        CTX,
        [C(INV, "spec.volumes[1].secret.secretName", "spec.volumes[1].secret.secretName is a required field")],
    ),
    (
        "service account without a name",
        S(*add_volume("sa", {"serviceAccount": {}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].serviceAccount.serviceAccountName",
                "spec.volumes[1].serviceAccount.serviceAccountName is a required field",
            )
        ],
    ),
    (
        "two service account volumes",
        S(
            (
                "volumes",
                [
                    *BASE["volumes"],
                    {"name": "sa1", "serviceAccount": {"serviceAccountName": "a"}},
                    {"name": "sa2", "serviceAccount": {"serviceAccountName": "a"}},
                ],
            )
        ),
        CTX,
        [C(INV, "spec.volumes", "spec.volumes must have max one serviceAccount volume set")],
    ),
    ("config map with a name passes", S(*add_volume("cm", {"configMap": {"name": "cm"}})), CTX, []),
    # Rule 25.
    (
        "cloud-init user data too long",
        S(*add_volume("ci", {"cloudInitNoCloud": {"userData": "x" * 2049}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].cloudInitNoCloud",
                "spec.volumes[1].cloudInitNoCloud userdata exceeds 2048 "
                "byte limit. Should use UserDataSecretRef for larger data.",
            )
        ],
    ),
    (
        "cloud-init user data at the limit passes",
        S(*add_volume("ci", {"cloudInitNoCloud": {"userData": "x" * 2048}})),
        CTX,
        [],
    ),
    (
        "cloud-init network data too long",
        S(*add_volume("ci", {"cloudInitConfigDrive": {"networkData": "x" * 2049}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].cloudInitConfigDrive",
                "spec.volumes[1].cloudInitConfigDrive networkdata exceeds 2048 "
                "byte limit. Should use NetworkDataSecretRef for larger data.",
            )
        ],
    ),
    (
        "cloud-init bad base64",
        S(*add_volume("ci", {"cloudInitNoCloud": {"userDataBase64": "!!not base64!!"}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].cloudInitNoCloud.userDataBase64",
                "spec.volumes[1].cloudInitNoCloud.userDataBase64.cloudInitNoCloud.userDataBase64 "
                "is not a valid base64 value.",
            )
        ],
    ),
    (
        "cloud-init good base64 passes",
        S(*add_volume("ci", {"cloudInitNoCloud": {"userDataBase64": "I2Nsb3VkLWNvbmZpZw=="}})),
        CTX,
        [],
    ),
    (
        "cloud-init two user data sources",
        S(*add_volume("ci", {"cloudInitNoCloud": {"userData": "#cloud-config", "userDataSecretRef": {"name": "s"}}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].cloudInitNoCloud",
                "spec.volumes[1].cloudInitNoCloud must have only one userdatasource set.",
            )
        ],
    ),
    (
        "cloud-init without data",
        S(*add_volume("ci", {"cloudInitNoCloud": {}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1].cloudInitNoCloud",
                "spec.volumes[1].cloudInitNoCloud must have at least one userdatasource or one networkdatasource set.",
            )
        ],
    ),
    # Rule 26.
    (
        "host disk without the gate",
        S(*add_volume("hd", {"hostDisk": {"path": "/data/disk.img", "type": "Disk"}})),
        CTX,
        [C(INV, "spec.volumes[1]", "HostDisk feature gate is not enabled")],
    ),
    (
        "host disk with the gate passes",
        S(*add_volume("hd", {"hostDisk": {"path": "/data/disk.img", "type": "DiskOrCreate", "capacity": "1Gi"}})),
        cfg(feature_gates=frozenset({"HostDisk"})),
        [],
    ),
    (
        "host disk without a path",
        S(*add_volume("hd", {"hostDisk": {"type": "Disk"}})),
        cfg(feature_gates=frozenset({"HostDisk"})),
        [C(NFOUND, "spec.volumes[1].hostDisk.path", "spec.volumes[1].hostDisk.path is required for hostDisk volume")],
    ),
    (
        "host disk type",
        S(*add_volume("hd", {"hostDisk": {"path": "/d.img", "type": "Directory"}})),
        cfg(feature_gates=frozenset({"HostDisk"})),
        [
            C(
                INV,
                "spec.volumes[1].hostDisk.type",
                "spec.volumes[1].hostDisk.type has invalid value 'Directory', allowed are 'Disk' or 'DiskOrCreate'",
            )
        ],
    ),
    (
        "host disk capacity with type Disk",
        S(*add_volume("hd", {"hostDisk": {"path": "/d.img", "type": "Disk", "capacity": "1Gi"}})),
        cfg(feature_gates=frozenset({"HostDisk"})),
        [
            C(
                INV,
                "spec.volumes[1].hostDisk.capacity",
                "spec.volumes[1].hostDisk.capacity is allowed to pass only "
                "with spec.volumes[1].hostDisk.type equal to 'DiskOrCreate'",
            )
        ],
    ),
    # Rule 27.
    (
        "container disk path is root",
        S(("volumes.0.containerDisk.path", "/")),
        CTX,
        [C(INV, "spec.volumes[0].containerDisk", "spec.volumes[0].containerDisk must not point to root")],
    ),
    (
        "container disk path relative",
        S(("volumes.0.containerDisk.path", "disk.img")),
        CTX,
        [
            C(
                INV,
                "spec.volumes[0].containerDisk",
                "spec.volumes[0].containerDisk must be an absolute path to a file without relative components",
            )
        ],
    ),
    (
        "container disk path with ..",
        S(("volumes.0.containerDisk.path", "/disk/../etc/passwd")),
        CTX,
        [
            C(
                INV,
                "spec.volumes[0].containerDisk",
                "spec.volumes[0].containerDisk must be an absolute path to a file without relative components",
            )
        ],
    ),
    ("container disk absolute path passes", S(("volumes.0.containerDisk.path", "/custom-disk/disk.img")), CTX, []),
    # Rule 28.
    (
        "efi and bios",
        S(("domain.firmware", {"bootloader": {"efi": {"secureBoot": False}, "bios": {}}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.firmware.bootloader",
                "spec.domain.firmware.bootloader has both EFI and BIOS configured, but they are mutually exclusive.",
            )
        ],
    ),
    (
        "secure boot without smm",
        S(("domain.firmware", {"bootloader": {"efi": {}}})),
        CTX,
        [
            C(
                INV,
                "spec.domain",
                "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.",
            )
        ],
    ),
    (
        "secure boot with smm passes",
        S(("domain.firmware", {"bootloader": {"efi": {}}}), ("domain.features", {"smm": {}})),
        CTX,
        [],
    ),
    ("efi without secure boot passes", S(("domain.firmware", {"bootloader": {"efi": {"secureBoot": False}}})), CTX, []),
    # Rule 29.
    (
        "kernel arguments without a kernel",
        S(("domain.firmware", {"kernelBoot": {"kernelArgs": "console=ttyS0"}})),
        CTX,
        [
            C(
                INV,
                "spec.domain.firmware.kernelBoot.kernelArgs",
                "kernel arguments cannot be provided without an external kernel",
            )
        ],
    ),
    (
        "kernel boot container without an image",
        S(("domain.firmware", {"kernelBoot": {"container": {"kernelPath": "/boot/vmlinuz"}}})),
        CTX,
        [
            C(
                REQ,
                "spec.domain.firmware.kernelBoot.container.image",
                "spec.domain.firmware.kernelBoot.container must be defined with an image",
            )
        ],
    ),
    (
        "kernel boot passes",
        S(
            (
                "domain.firmware",
                {
                    "kernelBoot": {
                        "kernelArgs": "console=ttyS0",
                        "container": {"image": "k:1", "kernelPath": "/boot/vmlinuz"},
                    }
                },
            )
        ),
        CTX,
        [],
    ),
    # Rule 30.
    (
        "input bus",
        S(("domain.devices.inputs", [{"name": "tablet", "type": "tablet", "bus": "ps2"}])),
        CTX,
        [C(INV, "spec.domain.devices.inputs[0].bus", "Input device can have only virtio or usb bus.")],
    ),
    (
        "input type",
        S(("domain.devices.inputs", [{"name": "kbd", "type": "keyboard", "bus": "usb"}])),
        CTX,
        [C(INV, "spec.domain.devices.inputs[0].type", "Input device can have only tablet type.")],
    ),
    ("usb tablet passes", S(("domain.devices.inputs", [{"name": "tablet", "type": "tablet", "bus": "usb"}])), CTX, []),
    # Rule 31.
    (
        "dns policy None without config",
        S(("dnsPolicy", "None")),
        CTX,
        [C(REQ, "spec.dnsConfig", "must provide `dnsConfig` when `dnsPolicy` is None")],
    ),
    (
        "too many nameservers",
        S(("dnsPolicy", "None"), ("dnsConfig", {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"]})),
        CTX,
        [C(INV, "nameservers", "must not have more than 3 nameservers: [1.1.1.1 2.2.2.2 3.3.3.3 4.4.4.4]")],
    ),
    (
        "dns policy unknown",
        S(("dnsPolicy", "Sometimes")),
        CTX,
        [
            C(
                NSUP,
                "spec.dnsPolicy",
                "DNSPolicy: Sometimes is not supported, valid values: "
                "[ClusterFirstWithHostNet ClusterFirst Default None ]",
            )
        ],
    ),
    (
        "dns policy None with config passes",
        S(("dnsPolicy", "None"), ("dnsConfig", {"nameservers": ["8.8.8.8"], "searches": ["ns1.svc.cluster.local"]})),
        CTX,
        [],
    ),
    # Rule 32 and its reverse.
    (
        "interface without a network",
        S(ifaces({"name": "default", "masquerade": {}}, {"name": "net1", "bridge": {}})),
        CTX,
        [C(INV, f"{IFACES}[1].name", f"{IFACES}[1].name 'net1' not found.")],
    ),
    (
        "network without an interface",
        S(nets({"name": "default", "pod": {}}, MULTUS)),
        CTX,
        [C(REQ, "spec.networks[1].name", "spec.networks[1].name 'net1' not found.")],
    ),
    (
        "duplicate network names",
        S(
            ifaces({"name": "default", "bridge": {}}),
            nets({"name": "default", "pod": {}}, {"name": "default", "multus": {"networkName": "x"}}),
        ),
        CTX,
        [
            C(
                DUP,
                "spec.networks[1].name",
                'Network with name "default" already exists, every network must have a unique name',
            )
        ],
    ),
    (
        "two interfaces on one network",
        S(ifaces({"name": "default", "masquerade": {}}, {"name": "default", "masquerade": {}})),
        CTX,
        [C(DUP, f"{IFACES}[1].name", "Only one interface can be connected to one specific network")],
    ),
    (
        "two pod networks",
        S(
            ifaces({"name": "default", "masquerade": {}}, {"name": "second", "masquerade": {}}),
            nets({"name": "default", "pod": {}}, {"name": "second", "pod": {}}),
        ),
        CTX,
        [C(DUP, "spec.interfaces", "more than one interface is connected to a pod network in spec.interfaces")],
    ),
    (
        "network without a type",
        S(ifaces({"name": "default", "bridge": {}}), nets({"name": "default"})),
        CTX,
        [C(REQ, "spec.networks[0]", "should have a network type")],
    ),
    (
        "network with two types",
        S(nets({"name": "default", "pod": {}, "multus": {"networkName": "x"}})),
        CTX,
        [C(REQ, "spec.networks[0]", "should have only one network type")],
    ),
    (
        "multus secondary network passes",
        S(
            ifaces({"name": "default", "masquerade": {}}, {"name": "net1", "bridge": {}}),
            nets({"name": "default", "pod": {}}, MULTUS),
        ),
        CTX,
        [],
    ),
    # Rule 33.
    (
        "interface without a binding",
        S(ifaces({"name": "default"})),
        CTX,
        [C(INV, f"{IFACES}[0]", "logical default interface must have exactly one binding method or binding plugin")],
    ),
    (
        "interface with two bindings",
        S(ifaces({"name": "default", "masquerade": {}, "bridge": {}})),
        CTX,
        [C(INV, f"{IFACES}[0]", "logical default interface must have exactly one binding method or binding plugin")],
    ),
    (
        "masquerade on a multus network",
        S(ifaces({"name": "net1", "masquerade": {}}), nets(MULTUS)),
        CTX,
        [C(INV, f"{IFACES}[0].name", "Masquerade interface only implemented with pod network")],
    ),
    (
        "bridge on the pod network not permitted",
        S(ifaces({"name": "default", "bridge": {}})),
        cfg(permit_bridge_interface_on_pod_network=False),
        [C(INV, f"{IFACES}[0].name", "Bridge on pod network configuration is not enabled under kubevirt-config")],
    ),
    ("bridge on the pod network passes by default", S(ifaces({"name": "default", "bridge": {}})), CTX, []),
    ("binding plugin passes", S(ifaces({"name": "default", "binding": {"name": "passt"}})), CTX, []),
    (
        "interface model",
        S(("domain.devices.interfaces.0.model", "vmxnet3")),
        CTX,
        [C(NSUP, f"{IFACES}[0].model", f"interface {IFACES}[0].name uses model vmxnet3 that is not supported.")],
    ),
    ("interface model e1000e passes", S(("domain.devices.interfaces.0.model", "e1000e")), CTX, []),
    (
        "forwarded port out of range",
        S(("domain.devices.interfaces.0.ports", [{"port": 70000}])),
        CTX,
        [C(INV, f"{IFACES}[0].ports[0].port", "Port field must be in range 0 < x < 65536.")],
    ),
    (
        "forwarded port missing",
        S(("domain.devices.interfaces.0.ports", [{"name": "http"}])),
        CTX,
        [C(REQ, f"{IFACES}[0].ports[0].port", "Port field is mandatory.")],
    ),
    (
        "forwarded port protocol",
        S(("domain.devices.interfaces.0.ports", [{"port": 80, "protocol": "SCTP"}])),
        CTX,
        [C(INV, f"{IFACES}[0].ports[0].protocol", "Unknown protocol, only TCP or UDP allowed")],
    ),
    (
        "forwarded port name invalid",
        S(("domain.devices.interfaces.0.ports", [{"name": "Web_Port", "port": 80}])),
        CTX,
        [C(INV, f"{IFACES}[0].ports[0].name", "Invalid name of the port: Web_Port")],
    ),
    (
        "forwarded port name duplicated",
        S(("domain.devices.interfaces.0.ports", [{"name": "http", "port": 80}, {"name": "http", "port": 8080}])),
        CTX,
        [C(DUP, f"{IFACES}[0].ports[1].name", "Duplicate name of the port: http")],
    ),
    (
        "forwarded ports pass",
        S(
            (
                "domain.devices.interfaces.0.ports",
                [{"name": "http", "port": 80}, {"name": "ssh", "port": 22, "protocol": "TCP"}],
            )
        ),
        CTX,
        [],
    ),
    # Interface state values and the absent rules.
    (
        "interface state unknown",
        S(("domain.devices.interfaces.0.state", "sleeping")),
        CTX,
        [C(INV, f"{IFACES}[0].state", "logical default interface state value is unsupported: sleeping")],
    ),
    (
        "absent masquerade interface on the pod network",
        S(("domain.devices.interfaces.0.state", "absent")),
        CTX,
        [
            C(INV, f"{IFACES}[0].state", '"default" interface\'s state "absent" is supported only for bridge binding'),
            C(INV, f"{IFACES}[0].state", '"default" interface\'s state "absent" is not supported on default networks'),
        ],
    ),
    (
        "sriov link state",
        S(
            ifaces({"name": "default", "masquerade": {}}, {"name": "net1", "sriov": {}, "state": "down"}),
            nets({"name": "default", "pod": {}}, MULTUS),
        ),
        CTX,
        [C(INV, f"{IFACES}[1].state", '"net1" interface\'s state "down" is not supported for SR-IOV NICs')],
    ),
    (
        "absent bridge on a secondary network passes",
        S(
            ifaces({"name": "default", "masquerade": {}}, {"name": "net1", "bridge": {}, "state": "absent"}),
            nets({"name": "default", "pod": {}}, MULTUS),
        ),
        CTX,
        [],
    ),
    ("link down passes", S(("domain.devices.interfaces.0.state", "down")), CTX, []),
    # DHCP options and NTP servers.
    (
        "dhcp private option out of range",
        S(("domain.devices.interfaces.0.dhcpOptions", {"privateOptions": [{"option": 100, "value": "x"}]})),
        CTX,
        [C(INV, "spec", "provided DHCPPrivateOptions are out of range, must be in range 224 to 254")],
    ),
    (
        "dhcp private options duplicated",
        S(
            (
                "domain.devices.interfaces.0.dhcpOptions",
                {"privateOptions": [{"option": 240, "value": "a"}, {"option": 240, "value": "b"}]},
            )
        ),
        CTX,
        [C(INV, "spec", "Found Duplicates: you have provided duplicate DHCPPrivateOptions")],
    ),
    (
        "ntp server not IPv4",
        S(("domain.devices.interfaces.0.dhcpOptions", {"ntpServers": ["127.0.0.1", "::1"]})),
        CTX,
        [C(INV, f"{IFACES}[0].dhcpOptions.ntpServers[1]", "NTP servers must be a list of valid IPv4 addresses.")],
    ),
    (
        "dhcp options pass",
        S(
            (
                "domain.devices.interfaces.0.dhcpOptions",
                {
                    "bootFileName": "pxe",
                    "ntpServers": ["10.0.0.1"],
                    "privateOptions": [{"option": 224, "value": "x"}, {"option": 254, "value": "y"}],
                },
            )
        ),
        CTX,
        [],
    ),
    # MAC and PCI addresses.
    (
        "mac address malformed",
        S(("domain.devices.interfaces.0.macAddress", "de:ad:00")),
        CTX,
        [C(INV, f"{IFACES}[0].macAddress", f"interface {IFACES}[0].name has malformed MAC address (de:ad:00).")],
    ),
    (
        "mac address too long",
        S(("domain.devices.interfaces.0.macAddress", "02:00:00:00:00:00:00:01")),
        CTX,
        [
            C(
                INV,
                f"{IFACES}[0].macAddress",
                f"interface {IFACES}[0].name has too long MAC address (02:00:00:00:00:00:00:01).",
            )
        ],
    ),
    (
        "mac address reserved for masquerade",
        S(("domain.devices.interfaces.0.macAddress", "02:00:00:00:00:00")),
        CTX,
        [
            C(
                INV,
                f"{IFACES}[0].macAddress",
                "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
            )
        ],
    ),
    ("mac address passes", S(("domain.devices.interfaces.0.macAddress", "de-ad-00-00-be-af")), CTX, []),
    (
        "interface pci address malformed",
        S(("domain.devices.interfaces.0.pciAddress", "0000:81:01.9")),
        CTX,
        [C(INV, f"{IFACES}[0].pciAddress", f"interface {IFACES}[0].name has malformed PCI address (0000:81:01.9).")],
    ),
    (
        "disk pci address malformed",
        S(("domain.devices.disks.0.disk.pciAddress", "81:01.0")),
        CTX,
        [
            C(
                INV,
                f"{DISKS}.domain.devices.disks.disk[0].pciAddress",
                f"disk {DISKS}.domain.devices.disks.disk[0].name has malformed PCI address (81:01.0).",
            )
        ],
    ),
    (
        "pci addresses pass",
        S(
            ("domain.devices.interfaces.0.pciAddress", "0000:81:01.0"),
            ("domain.devices.disks.0.disk.pciAddress", "0000:0a:00.0"),
        ),
        CTX,
        [],
    ),
    (
        "interface name characters",
        S(ifaces({"name": "eth.0", "bridge": {}}), nets({"name": "eth.0", "multus": {"networkName": "x"}})),
        CTX,
        [
            C(
                INV,
                f"{IFACES}[0].name",
                "Network interface name can only contain alphabetical "
                "characters, numbers, dashes (-) or underscores (_)",
            )
        ],
    ),
    # Rule 34.
    (
        "ssh key via noCloud without a noCloud volume",
        S(
            (
                "accessCredentials",
                [{"sshPublicKey": {"source": {"secret": {"secretName": "k"}}, "propagationMethod": {"noCloud": {}}}}],
            )
        ),
        CTX,
        [
            C(
                INV,
                "spec.accessCredentials[0].sshPublicKey.propagationMethod",
                "spec.accessCredentials[0] requires a noCloud volume to "
                "exist when the noCloud propagationMethod is in use.",
            )
        ],
    ),
    (
        "ssh key without a source",
        S(("accessCredentials", [{"sshPublicKey": {"propagationMethod": {"qemuGuestAgent": {"users": ["fedora"]}}}}])),
        CTX,
        [
            C(
                INV,
                "spec.accessCredentials[0].sshPublicKey.source",
                "spec.accessCredentials[0] must have exactly one source set",
            )
        ],
    ),
    (
        "ssh key via guest agent passes",
        S(
            (
                "accessCredentials",
                [
                    {
                        "sshPublicKey": {
                            "source": {"secret": {"secretName": "k"}},
                            "propagationMethod": {"qemuGuestAgent": {"users": ["fedora"]}},
                        }
                    }
                ],
            )
        ),
        CTX,
        [],
    ),
    # Rule 36.
    (
        "host devices without the gate",
        S(("domain.devices.hostDevices", [{"name": "gpu", "deviceName": "nvidia.com/GP100"}])),
        CTX,
        [C(INV, "spec.HostDevices", "Host Devices feature gate is not enabled in kubevirt-config")],
    ),
    (
        "host devices with the gate pass",
        S(("domain.devices.hostDevices", [{"name": "gpu", "deviceName": "nvidia.com/GP100"}])),
        cfg(feature_gates=frozenset({"HostDevices"})),
        [],
    ),
    (
        "downward metrics volume without the gate",
        S(*add_volume("metrics", {"downwardMetrics": {}})),
        CTX,
        [
            C(
                INV,
                "spec.volumes[1]",
                "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled.",
            )
        ],
    ),
    (
        "video with graphics off",
        S(("domain.devices.video", {"type": "virtio"}), ("domain.devices.autoattachGraphicsDevice", False)),
        CTX,
        [C(INV, "spec.video", "Video configuration is not allowed when autoattachGraphicsDevice is set to false")],
    ),
    ("video with graphics passes", S(("domain.devices.video", {"type": "virtio"})), CTX, []),
    (
        "sound model",
        S(("domain.devices.sound", {"name": "audio", "model": "sb16"})),
        CTX,
        [C(INV, "spec.Sound", "Sound device type is not supported. Options: 'ich9' or 'ac97'")],
    ),
    ("sound ich9 passes", S(("domain.devices.sound", {"name": "audio", "model": "ich9"})), CTX, []),
    # Realtime (beyond the reference).
    (
        "realtime without numa passthrough",
        S(("domain.cpu", {"dedicatedCpuPlacement": True, "cores": 2, "realtime": {"mask": "0-1"}})),
        CTX,
        [
            C(
                REQ,
                "spec.domain.cpu.numa.guestMappingPassthrough",
                "spec.domain.cpu.numa.guestMappingPassthrough must be defined when spec.domain.cpu.realtime is used",
            )
        ],
    ),
    (
        "realtime without dedicated cpus",
        S(
            ("domain.cpu", {"cores": 2, "realtime": {}, "numa": {"guestMappingPassthrough": {}}}),
            ("domain.memory", {"hugepages": {"pageSize": "2Mi"}, "guest": "128Mi"}),
        ),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.numa.guestMappingPassthrough",
                "spec.domain.cpu.dedicatedCpuPlacement must be set to true when NUMA topology strategy is set in "
                "spec.domain.cpu.numa.guestMappingPassthrough",
            ),
            C(
                REQ,
                "spec.domain.cpu.dedicatedCpuPlacement",
                "spec.domain.cpu.dedicatedCpuPlacement must be set to true when spec.domain.cpu.realtime is used",
            ),
        ],
    ),
    (
        "realtime with numa passthrough and hugepages passes",
        S(
            (
                "domain.cpu",
                {"dedicatedCpuPlacement": True, "cores": 2, "realtime": {}, "numa": {"guestMappingPassthrough": {}}},
            ),
            ("domain.memory", {"hugepages": {"pageSize": "2Mi"}, "guest": "128Mi"}),
        ),
        CTX,
        [],
    ),
    # reservedOverhead memLock (beyond the reference).
    (
        "reserved overhead without the gate",
        S(("domain.memory.reservedOverhead", {"memLock": "Required"})),
        CTX,
        [
            C(
                INV,
                "spec.domain.memory.reservedOverhead",
                "Reserved overhead memlock feature gate is not enabled in kubevirt-config",
            )
        ],
    ),
    (
        "reserved overhead with the gate passes",
        S(("domain.memory.reservedOverhead", {"memLock": "Required"})),
        cfg(feature_gates=frozenset({"ReservedOverheadMemlock"})),
        [],
    ),
    # Rule 5's VMI half.
    (
        "sockets above maxSockets",
        S(("domain.cpu", {"sockets": 4, "maxSockets": 2, "cores": 1, "threads": 1})),
        CTX,
        [
            C(
                INV,
                "spec.domain.cpu.sockets",
                "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            )
        ],
    ),
    (
        "persistent reservation passes (GA gate, see INDEX.md scenario 048)",
        S(
            *add_volume(
                "shared",
                {"persistentVolumeClaim": {"claimName": "shared"}},
                {"lun": {"bus": "scsi", "reservation": True}},
            )
        ),
        CTX,
        [],
    ),
]


@pytest.mark.parametrize(("spec", "ctx", "expected"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_vmi_spec_rules(spec: dict[str, Any], ctx: AdmissionContext, expected: list[Cause]) -> None:
    assert validate_vmi_spec(spec, FieldPath("spec"), ctx) == expected


def test_vm_template_paths_are_prefixed() -> None:
    spec = S(("domain.devices.disks.0.cache", "unsafe"))
    assert validate_vmi_spec(spec, FieldPath("spec.template.spec"), CTX) == [
        C(
            INV,
            "spec.template.spec.domain.devices.disks[0].cache",
            "spec.template.spec.domain.devices.disks[0].cache has invalid value unsafe",
        )
    ]


def lookup_ctx(objects: dict[ObjectKey, dict[str, Any]], **kwargs: Any) -> AdmissionContext:
    return AdmissionContext(lookup=DictLookup(objects), **kwargs)


def vm(template_spec: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A VirtualMachine around a template spec (BASE without its defaults-only fields by default)."""
    body: dict[str, Any] = {"runStrategy": "Halted", **spec}
    if template_spec is not None:
        body["template"] = {"spec": template_spec}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": body,
    }


def raw_template(*edits: tuple[str, Any]) -> dict[str, Any]:
    """BASE without the fields defaulting fills in (the VM webhook defaults a copy itself), then the edits."""
    return S(("architecture", DELETE), ("domain.machine", DELETE), *edits)


TPL = "spec.template.spec"
STANDARD_2 = {
    ("VirtualMachineClusterInstancetype", None, "standard-2"): {
        "spec": {"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}}
    }
}

VM_CASES: list[tuple[str, dict[str, Any], AdmissionContext, list[Cause]]] = [
    ("vm passes", vm(raw_template()), CTX, []),
    # Rule 1.
    ("missing template", vm(None), CTX, [C(REQ, "spec.template", "missing virtual machine template.")]),
    # Rules 2-4.
    (
        "running and runStrategy",
        vm(raw_template(), running=True),
        CTX,
        [
            C(
                INV,
                "spec.running",
                "Running and RunStrategy are mutually exclusive. Note that "
                "Running is deprecated, please use RunStrategy instead",
            )
        ],
    ),
    (
        "running alone passes",
        {**vm(raw_template()), "spec": {"running": False, "template": {"spec": raw_template()}}},
        CTX,
        [],
    ),
    (
        "no run strategy",
        {**vm(raw_template()), "spec": {"template": {"spec": raw_template()}}},
        CTX,
        [C(INV, "spec.running", "RunStrategy must be specified")],
    ),
    (
        "invalid run strategy",
        vm(raw_template(), runStrategy="Sometimes"),
        CTX,
        [C(INV, "spec.runStrategy", "Invalid RunStrategy (Sometimes)")],
    ),
    ("WaitAsReceiver passes (Beta gate)", vm(raw_template(), runStrategy="WaitAsReceiver"), CTX, []),
    (
        "WaitAsReceiver with the gate disabled",
        vm(raw_template(), runStrategy="WaitAsReceiver"),
        cfg(disabled_feature_gates=frozenset({"DecentralizedLiveMigration"})),
        [
            C(
                INV,
                "spec.runStrategy",
                "Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration "
                "feature gate is not enabled in kubevirt resource",
            )
        ],
    ),
    # Rule 5: reported by the shared spec check and by the VM's live-update check.
    (
        "sockets above maxSockets",
        vm(raw_template(("domain.cpu", {"sockets": 6, "maxSockets": 4}))),
        CTX,
        [
            C(
                INV,
                f"{TPL}.domain.cpu.sockets",
                "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            )
        ]
        * 2,
    ),
    (
        "sockets within maxSockets pass",
        vm(raw_template(("domain.cpu", {"sockets": 2, "cores": 4, "maxSockets": 4}))),
        CTX,
        [],
    ),
    # Rule 6.
    (
        "template conflicts with the instance type",
        vm(
            raw_template(("domain.cpu", {"sockets": 2}), ("domain.memory", {"guest": "1Gi"})),
            instancetype={"name": "standard-2"},
        ),
        lookup_ctx(STANDARD_2),
        [
            C(
                INV,
                f"{TPL}.domain.cpu.sockets",
                f"VM field(s) {TPL}.domain.cpu.sockets conflicts with selected instance type",
            ),
            C(
                INV,
                f"{TPL}.domain.memory.guest",
                f"VM field(s) {TPL}.domain.memory.guest conflicts with selected instance type",
            ),
        ],
    ),
    (
        "missing instance type is ignored",
        vm(raw_template(("domain.cpu", {"sockets": 2})), instancetype={"name": "standard-2"}),
        CTX,
        [],
    ),
    (
        "instance type applied passes",
        vm(raw_template(("domain.cpu", DELETE), ("domain.memory", DELETE)), instancetype={"name": "standard-2"}),
        lookup_ctx(STANDARD_2),
        [],
    ),
    (
        "preference requirements not met",
        vm(
            raw_template(("domain.cpu", DELETE), ("domain.memory", DELETE)),
            instancetype={"name": "standard-2"},
            preference={"name": "big"},
        ),
        lookup_ctx(
            {
                **STANDARD_2,
                ("VirtualMachineClusterPreference", None, "big"): {"spec": {"requirements": {"cpu": {"guest": 4}}}},
            }
        ),
        [
            C(
                NFOUND,
                "spec.instancetype",
                "failure checking preference requirements: insufficient "
                "CPU resources of 2 vCPU provided by instance type, "
                "preference requires 4 vCPU",
            )
        ],
    ),
    (
        "preference memory requirement not met by the VM",
        vm(raw_template(), preference={"name": "big", "kind": "VirtualMachinePreference"}),
        lookup_ctx(
            {("VirtualMachinePreference", "default", "big"): {"spec": {"requirements": {"memory": {"guest": "1Gi"}}}}}
        ),
        [
            C(
                NFOUND,
                f"{TPL}.domain.memory",
                "failure checking preference requirements: insufficient "
                "Memory resources of 128Mi provided by VirtualMachine, "
                "preference requires 1Gi",
            )
        ],
    ),
    # Rule 8: VM templates get a disk for every volume from defaulting, so a lone volume passes.
    ("volume without disk passes in a VM", vm(raw_template(("domain.devices.disks", []))), CTX, []),
    # Rule 14 is VMI-only.
    ("no memory passes in a VM", vm(raw_template(("domain.memory", DELETE))), CTX, []),
    # Rule 33's creation-only part; upstream runs it on the template with the path "spec", not "spec.template.spec".
    (
        "slirp interface",
        vm(raw_template(ifaces({"name": "default", "slirp": {}}))),
        CTX,
        [C(INV, "spec.domain.devices.interfaces[0].slirp", "Slirp interface support has been discontinued since v1.3")],
    ),
    # Rule 35 inside a VM template.
    (
        "reserved label on the template",
        {
            **vm(raw_template()),
            "spec": {
                "runStrategy": "Halted",
                "template": {"metadata": {"labels": {"kubevirt.io/nodeName": "n1"}}, "spec": raw_template()},
            },
        },
        CTX,
        [
            C(
                NSUP,
                "spec.template.metadata.labels",
                "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
            )
        ],
    ),
    (
        "sidecar annotation without the gate",
        {
            **vm(raw_template()),
            "spec": {
                "runStrategy": "Halted",
                "template": {
                    "metadata": {"annotations": {"hooks.kubevirt.io/hookSidecars": "[]"}},
                    "spec": raw_template(),
                },
            },
        },
        CTX,
        [
            C(
                INV,
                "spec.template.metadata.annotations",
                "sidecar feature gate is not enabled in kubevirt-config, invalid entry "
                "spec.template.metadata.annotations.hooks.kubevirt.io/hookSidecars",
            )
        ],
    ),
    # Memory hotplug (ValidateLiveUpdateMemory).
    ("memory hotplug passes", vm(raw_template(("domain.memory", {"guest": "4Gi", "maxGuest": "8Gi"}))), CTX, []),
    (
        "guest above maxGuest",
        vm(raw_template(("domain.memory", {"guest": "4Gi", "maxGuest": "2Gi"}))),
        CTX,
        [C(INV, f"{TPL}.domain.memory.guest", "Guest memory is greater than the configured maxGuest memory")],
    ),
    (
        "guest not 2Mi aligned",
        vm(raw_template(("domain.memory", {"guest": "1025Mi", "maxGuest": "4Gi"}))),
        CTX,
        [C(INV, f"{TPL}.domain.memory.guest", "Guest memory must be 2Mi aligned")],
    ),
    (
        "guest below 1Gi",
        vm(raw_template(("domain.memory", {"guest": "512Mi", "maxGuest": "2Gi"}))),
        CTX,
        [
            C(
                INV,
                f"{TPL}.domain.memory.guest",
                "Memory hotplug is only available for VMs with at least 1Gi of guest memory",
            )
        ],
    ),
    (
        "memory hotplug on arm64",
        vm(raw_template(("architecture", "arm64"), ("domain.memory", {"guest": "2Gi", "maxGuest": "4Gi"}))),
        CTX,
        [C(INV, f"{TPL}.domain.memory.guest", "Memory hotplug is only available for x86_64 VMs")],
    ),
    (
        "memory hotplug with realtime",
        vm(
            raw_template(
                ("domain.memory", {"guest": "2Gi", "maxGuest": "4Gi"}),
                (
                    "domain.cpu",
                    {
                        "cores": 2,
                        "dedicatedCpuPlacement": True,
                        "realtime": {},
                        "numa": {"guestMappingPassthrough": {}},
                    },
                ),
                ("domain.memory.hugepages", {"pageSize": "2Mi"}),
            )
        ),
        CTX,
        [C(INV, f"{TPL}.domain.memory.guest", "Memory hotplug is not compatible with realtime VMs")],
    ),
]

DV_SOURCE = {"http": {"url": "https://example.com/fedora.qcow2"}}
DV_PVC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}


def dv_vm(template: dict[str, Any], *, referenced: bool = True) -> dict[str, Any]:
    volumes = [{"name": "root", "dataVolume": {"name": "root-dv"}}] if referenced else BASE["volumes"]
    disks = [{"name": volumes[0]["name"], "disk": {"bus": "virtio"}}]
    return vm(raw_template(("volumes", volumes), ("domain.devices.disks", disks)), dataVolumeTemplates=[template])


DVT = "spec.dataVolumeTemplate[0]"
VM_CASES += [
    (
        "data volume template passes",
        dv_vm({"metadata": {"name": "root-dv"}, "spec": {"source": DV_SOURCE, "pvc": DV_PVC}}),
        CTX,
        [],
    ),
    (
        "data volume template not referenced",
        dv_vm({"metadata": {"name": "root-dv"}, "spec": {"source": DV_SOURCE, "pvc": DV_PVC}}, referenced=False),
        CTX,
        [C(REQ, DVT, f"DataVolumeTemplate entry {DVT} must be referenced in the VMI template's 'volumes' list")],
    ),
    (
        "data volume template without a name",
        dv_vm({"metadata": {}, "spec": {"source": DV_SOURCE, "pvc": DV_PVC}}),
        CTX,
        [C(REQ, f"{DVT}.name", f"'name' field must not be empty for DataVolumeTemplate entry {DVT}.name.")],
    ),
    (
        "data volume template without pvc or storage",
        dv_vm({"metadata": {"name": "root-dv"}, "spec": {"source": DV_SOURCE}}),
        CTX,
        [C(INV, f"{DVT}.PVC.Storage", "Missing Data volume PVC or Storage")],
    ),
    (
        "data volume template without a source",
        dv_vm({"metadata": {"name": "root-dv"}, "spec": {"storage": {}}}),
        CTX,
        [
            C(
                INV,
                f"{DVT}.source.sourceRef",
                "Data volume should have either Source, SourceRef, or be externally populated",
            )
        ],
    ),
    (
        "data volume template with two sources",
        dv_vm({"metadata": {"name": "root-dv"}, "spec": {"source": {**DV_SOURCE, "blank": {}}, "storage": {}}}),
        CTX,
        [C(INV, f"{DVT}.source", "Multiple dataVolume sources")],
    ),
    (
        "data volume template in another namespace",
        dv_vm(
            {
                "metadata": {"name": "root-dv", "namespace": "other"},
                "spec": {"sourceRef": {"kind": "DataSource", "name": "fedora"}, "storage": {}},
            }
        ),
        CTX,
        [
            C(
                INV,
                "spec.dataVolumeTemplates[0]",
                "Embedded DataVolume namespace other differs from VM namespace default",
            )
        ],
    ),
]


@pytest.mark.parametrize(("obj", "ctx", "expected"), [c[1:] for c in VM_CASES], ids=[c[0] for c in VM_CASES])
def test_vm_rules(obj: dict[str, Any], ctx: AdmissionContext, expected: list[Cause]) -> None:
    assert validate_vm(obj, ctx) == expected


def test_vm_being_deleted_is_not_validated() -> None:
    obj = vm(None)
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert validate_vm(obj, CTX) == []


def _with_volume_requests(requests: list[dict[str, Any]], *, ready: bool = False) -> dict[str, Any]:
    obj = vm(raw_template())
    obj["status"] = {"volumeRequests": requests, "ready": ready}
    return obj


HOTPLUG = {
    "addVolumeOptions": {
        "name": "data",
        "disk": {"disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "data"}},
    }
}


def test_rule7_volume_requests() -> None:
    assert validate_vm(_with_volume_requests([HOTPLUG]), CTX) == []
    assert validate_vm(_with_volume_requests([HOTPLUG, HOTPLUG]), CTX) == [
        C(INV, "Status.volumeRequests", "AddVolume request for [data] aleady exists")
    ]
    removal = {"removeVolumeOptions": {"name": "data"}}
    assert validate_vm(_with_volume_requests([removal, removal]), CTX) == [
        C(INV, "Status.volumeRequests", "RemoveVolume request for [data] aleady exists")
    ]
    sata = {"addVolumeOptions": {**HOTPLUG["addVolumeOptions"], "disk": {"disk": {"bus": "sata"}}}}
    assert validate_vm(_with_volume_requests([sata]), CTX) == [
        C(
            INV,
            "Status.volumeRequests",
            "AddVolume request for disk [data] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted.",
        )
    ]


def test_rule7_volume_requests_during_migration() -> None:
    vmi = {
        "metadata": {"name": "vm"},
        "spec": S(),
        "status": {"migrationState": {"startTimestamp": "2026-01-01T00:00:00Z"}},
    }
    ctx = lookup_ctx({("VirtualMachineInstance", "default", "vm"): vmi})
    assert validate_vm(_with_volume_requests([HOTPLUG], ready=True), ctx) == [
        C(NSUP, "spec", "Cannot handle volume requests while VMI migration is in progress")
    ]
    vmi["status"]["migrationState"]["endTimestamp"] = "2026-01-01T00:01:00Z"
    ctx = lookup_ctx({("VirtualMachineInstance", "default", "vm"): vmi}, now=lambda: "2026-01-02T00:00:00Z")
    assert validate_vm(_with_volume_requests([HOTPLUG], ready=True), ctx) == []


def test_vm_snapshot_in_progress_freezes_volumes() -> None:
    old = vm(raw_template())
    new = vm(raw_template(*add_volume("data", {"emptyDisk": {"capacity": "1Gi"}})))
    new["status"] = {"snapshotInProgress": "snap"}
    assert validate_vm(new, CTX, old=old) == [
        C(NSUP, "spec", 'Cannot update vm disks or volumes until snapshot "snap" completes')
    ]
    assert validate_vm(new, CTX, old=new) == []


def test_vm_forbidden_default_binding_is_a_plain_error() -> None:
    ctx = cfg(permit_bridge_interface_on_pod_network=False)
    causes = validate_vm(vm(raw_template(ifaces(), nets())), ctx)
    assert [c.type for c in causes] == [REQUEST_ERROR]
    assert "bridge" in causes[0].message


def vmi(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi", "namespace": "default", **metadata},
        "spec": spec,
    }


VMI_CASES: list[tuple[str, dict[str, Any], AdmissionContext, list[Cause]]] = [
    ("vmi passes", vmi(S()), CTX, []),
    # Rule 8's VMI-only half.
    (
        "volume without disk",
        vmi(S(("domain.devices.disks", []))),
        CTX,
        [C(INV, "spec.domain.volumes[0].name", "spec.domain.volumes[0].name 'rootdisk' not found.")],
    ),
    # Rule 14.
    (
        "no memory requested",
        vmi(S(("domain.memory", DELETE))),
        CTX,
        [
            C(
                REQ,
                "",
                "no memory requested, at least one of 'spec.domain.memory.guest', "
                "'spec.domain.memory.hugepages.pageSize' "
                "or 'spec.domain.resources.requests.memory' must be set",
            )
        ],
    ),
    (
        "memory request alone passes",
        vmi(S(("domain.memory", DELETE), ("domain.resources", {"requests": {"memory": "1Gi"}}))),
        CTX,
        [],
    ),
    # Rule 35.
    (
        "reserved label",
        vmi(S(), labels={"kubevirt.io/created-by": "me"}),
        CTX,
        [
            C(
                NSUP,
                "metadata.labels",
                "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
            )
        ],
    ),
    (
        "reserved label from KubeVirt passes",
        vmi(S(), labels={"kubevirt.io/created-by": "uid"}),
        AdmissionContext(username=KUBEVIRT_SA),
        [],
    ),
    ("ordinary label passes", vmi(S(), labels={"app": "web", "kubevirt.io/domain": "vmi"}), CTX, []),
    # virt-api registers the storage and network validators on top of the shared spec check, so VMIs see those twice.
    (
        "network and disk causes are reported twice for a VMI",
        vmi(S(ifaces({"name": "default"}))),
        CTX,
        [C(INV, f"{IFACES}[0]", "logical default interface must have exactly one binding method or binding plugin")]
        * 2,
    ),
    # Per-architecture checks.
    (
        "unsupported architecture",
        vmi(S(("architecture", "riscv64"))),
        CTX,
        [C(INV, "spec.architecture", "unsupported architecture: riscv64")],
    ),
    (
        "watchdog on amd64",
        vmi(S(("domain.devices.watchdog", {"name": "wd", "diag288": {}}))),
        CTX,
        [C(NSUP, "spec.domain.devices.watchdog", "amd64 only supports I6300ESB watchdog device")],
    ),
    (
        "i6300esb watchdog passes",
        vmi(S(("domain.devices.watchdog", {"name": "wd", "i6300esb": {"action": "reset"}}))),
        CTX,
        [],
    ),
    # Hyper-V dependencies.
    (
        "synic without vpindex",
        vmi(S(("domain.features", {"hyperv": {"synic": {"enabled": True}, "vpindex": {"enabled": False}}}))),
        CTX,
        [
            C(
                INV,
                "spec.domain.features.hyperv.domain.features.hyperv.synic",
                "'spec.domain.features.hyperv.domain.features.hyperv.synic' requires "
                "'spec.domain.features.hyperv.domain.features.hyperv.vpindex', which was disabled.",
            )
        ],
    ),
]


@pytest.mark.parametrize(("obj", "ctx", "expected"), [c[1:] for c in VMI_CASES], ids=[c[0] for c in VMI_CASES])
def test_vmi_create_rules(obj: dict[str, Any], ctx: AdmissionContext, expected: list[Cause]) -> None:
    assert validate_vmi_create(obj, ctx) == expected


def test_rule37_vmi_update() -> None:
    old = vmi(S(), labels={"kubevirt.io/nodeName": "node1"})
    changed_spec = vmi(S(("domain.memory.guest", "256Mi")), labels={"kubevirt.io/nodeName": "node1"})
    moved = vmi(S(), labels={"kubevirt.io/nodeName": "node2"})
    relabelled = vmi(S(), labels={"kubevirt.io/nodeName": "node1", "app": "web"})
    assert validate_vmi_update(changed_spec, old, CTX) == [C(NSUP, "", "update of VMI object is restricted")]
    assert validate_vmi_update(changed_spec, old, AdmissionContext(username=KUBEVIRT_SA)) == []
    assert validate_vmi_update(moved, old, CTX) == [
        C(NSUP, "", "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited")
    ]
    assert validate_vmi_update(moved, old, AdmissionContext(username=KUBEVIRT_SA)) == []
    assert validate_vmi_update(relabelled, old, CTX) == []


def test_vmi_update_hotplug_limits_are_fixed() -> None:
    kv = AdmissionContext(username=KUBEVIRT_SA)
    old = vmi(S(("domain.cpu.maxSockets", 4)))
    assert validate_vmi_update(vmi(S(("domain.cpu.maxSockets", 8))), old, kv) == [
        C(INV, "", "CPU topology maxSockets changed")
    ]
    assert validate_vmi_update(vmi(S(("domain.cpu.maxSockets", 4), ("domain.cpu.sockets", 2))), old, kv) == []


def migration(vmi_name: str = "testvmi", **spec: Any) -> dict[str, Any]:
    body = {"vmiName": vmi_name, **spec} if vmi_name else dict(spec)
    return {"kind": "VirtualMachineInstanceMigration", "metadata": {"name": "m1", "namespace": "default"}, "spec": body}


def running_vmi(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "testvmi", "namespace": "default"},
        "spec": S(),
        "status": {"phase": "Running", **status},
    }


def test_rule38_migration_create() -> None:
    vmi_key = ("VirtualMachineInstance", "default", "testvmi")
    assert validate_migration_create(migration(""), CTX) == [C(REQ, "spec.vmiName", "vmiName is missing")]
    assert validate_migration_create(migration(), CTX) == [
        C(REQUEST_ERROR, "", 'the VMI "default/testvmi" does not exist')
    ]
    assert validate_migration_create(migration(), lookup_ctx({vmi_key: running_vmi()})) == []
    assert validate_migration_create(migration(), lookup_ctx({vmi_key: running_vmi(phase="Succeeded")})) == [
        C(REQUEST_ERROR, "", "Cannot migrate VMI in finalized state.")
    ]
    not_migratable = running_vmi(
        conditions=[
            {
                "type": "LiveMigratable",
                "status": "False",
                "reason": "DisksNotLiveMigratable",
                "message": "PVC x is not shared",
            }
        ]
    )
    assert validate_migration_create(migration(), lookup_ctx({vmi_key: not_migratable})) == [
        C(REQUEST_ERROR, "", "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: PVC x is not shared")
    ]
    in_flight = {
        "metadata": {
            "name": "m0",
            "namespace": "default",
            "uid": "uid-0",
            "labels": {"kubevirt.io/vmi-name": "testvmi"},
        },
        "spec": {"vmiName": "testvmi"},
        "status": {"phase": "Running"},
    }
    ctx = lookup_ctx({vmi_key: running_vmi(), ("VirtualMachineInstanceMigration", "default", "m0"): in_flight})
    assert validate_migration_create(migration(), ctx) == [
        C(
            REQUEST_ERROR,
            "",
            "in-flight migration detected. Active migration job "
            "(uid-0) is currently already in progress for VMI testvmi.",
        )
    ]
    in_flight["status"] = {"phase": "Succeeded"}
    assert validate_migration_create(migration(), ctx) == []
    assert validate_migration_create(migration(priority="user-triggered"), ctx) == [
        C(
            FORB,
            "spec.migrationPriority",
            "Migration priority queue, only virt-controller is allowed to set priority field",
        )
    ]


def test_instancetype_and_preference_objects() -> None:
    assert (
        validate_instancetype({"spec": {"cpu": {"guest": 2}, "memory": {"guest": "4Gi", "overcommitPercent": 25}}}, CTX)
        == []
    )
    assert validate_instancetype(
        {"spec": {"cpu": {"guest": 2}, "memory": {"guest": "4Gi", "overcommitPercent": 150}}}, CTX
    ) == [
        C(
            INV,
            "spec.memory.overcommitPercent",
            "spec.memory.overcommitPercent '150': must be in range between 0 and 100.",
        )
    ]
    hugepages = {"guest": "4Gi", "overcommitPercent": 10, "hugepages": {"pageSize": "2Mi"}}
    assert validate_instancetype({"spec": {"cpu": {"guest": 2}, "memory": hugepages}}, CTX) == [
        C(
            INV,
            "spec.memory.overcommitPercent",
            "spec.memory.overcommitPercent and spec.memory.hugepages should not be requested together.",
        )
    ]
    assert validate_preference({"spec": {"cpu": {"preferredCPUTopology": "spread"}}}, CTX) == []
    assert validate_preference({"spec": {"cpu": {"preferredCPUTopology": "diagonal"}}}, CTX) == [
        C(INV, "spec.cpu.preferredCPUTopology", "unknown preferredCPUTopology diagonal")
    ]
    bad_ratio = {"preferredCPUTopology": "spread", "spreadOptions": {"across": "CoresThreads", "ratio": 4}}
    assert validate_preference({"spec": {"cpu": bad_ratio}}, CTX) == [
        C(
            INV,
            "spec.cpu.spreadOptions.ratio",
            "only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads",
        )
    ]


DV = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": "dv"}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"source": DV_SOURCE, "pvc": DV_PVC}, []),
        ({"sourceRef": {"kind": "DataSource", "name": "fedora"}, "storage": {}}, []),
        ({"source": DV_SOURCE}, [C(INV, "spec.PVC", "Missing Data volume PVC")]),
        (
            {"source": DV_SOURCE, "pvc": DV_PVC, "storage": {}},
            [C(INV, "spec.PVC.Storage", "Duplicate storage definition, both target storage and target pvc defined")],
        ),
        (
            {"source": DV_SOURCE, "pvc": {"accessModes": ["ReadWriteOnce"]}},
            [C(INV, "spec.PVC.resources.requests.size", "PVC size is missing")],
        ),
        ({"pvc": DV_PVC}, [C(INV, "spec.source", "Data volume should have either Source or SourceRef")]),
        ({"source": {}, "pvc": DV_PVC}, [C(INV, "spec.source", "Missing Data volume source")]),
        (
            {"source": {**DV_SOURCE, "blank": {}}, "pvc": DV_PVC},
            [C(INV, "spec.source", "Multiple Data volume sources")],
        ),
        (
            {"source": {"http": {"url": "ftp://x/y"}}, "pvc": DV_PVC},
            [C(INV, "spec.source.HTTP.url", "spec.source Invalid source URL scheme: ftp://x/y")],
        ),
        (
            {"sourceRef": {"kind": "PVC", "name": "x"}, "storage": {}},
            [C(INV, "spec.sourceRef.Kind", "Unsupported sourceRef kind PVC, currently only DataSource is supported")],
        ),
    ],
)
def test_datavolume(spec: dict[str, Any], expected: list[Cause]) -> None:
    assert validate_datavolume({**DV, "spec": spec}, CTX) == expected


def test_instancetype_conflicts_paths() -> None:
    template = {
        "nodeSelector": {"a": "b"},
        "domain": {
            "cpu": {"sockets": 2, "cores": 1, "model": "host-model"},
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "memory": {"guest": "1Gi"},
        },
    }
    it = {"cpu": {"guest": 2, "model": "Haswell"}, "memory": {"guest": "4Gi"}, "nodeSelector": {"x": "y"}}
    assert instancetype_conflicts(template, it, FieldPath("spec.template.spec")) == [
        "spec.template.spec.nodeSelector",
        "spec.template.spec.domain.resources.requests.cpu",
        "spec.template.spec.domain.cpu.sockets",
        "spec.template.spec.domain.cpu.cores",
        "spec.template.spec.domain.cpu.model",
        "spec.template.spec.domain.memory.guest",
    ]
    assert instancetype_conflicts({"domain": {"devices": {}}}, it, FieldPath("spec.template.spec")) == []
    assert instancetype_conflicts(
        {}, {"annotations": {"k": "v"}, "cpu": {"guest": 1}}, FieldPath("spec"), template_annotations={"k": "w"}
    ) == ["annotations.k"]
