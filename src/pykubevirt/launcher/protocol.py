"""The handler↔launcher protocol: one JSON object per line over the launcher's unix socket. Pure.

KubeVirt versions the same seam (`pkg/handler-launcher-com/cmd/v1/cmd.proto`). Here every request carries the
handler's `protocolVersion` and every reply (and every watch update) the launcher's, so either side can refuse a
peer that speaks another version with a readable error instead of misreading its fields.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Final, NotRequired, TypedDict

# Bump when a command, a request field or a reply field changes meaning; both sides must then be upgraded together.
# Adding a command does not: a launcher that lacks it answers "unknown command" (`hotplug` was added in version 1).
# Nor does an optional reply field whose absence the reader handles (`domainstats`' `migrationJob`).
PROTOCOL_VERSION: Final = 1
# The longest line either side reads: a request carries a whole VMI.
MAX_LINE: Final = 4 * 1024 * 1024


class Command(StrEnum):
    """What virt-handler asks a launcher to do (cmd.proto's Cmd service)."""

    PING = "ping"
    STATUS = "status"
    SYNC = "sync"
    SHUTDOWN = "shutdown"
    KILL = "kill"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    SOFT_REBOOT = "softreboot"
    # A hard reset (virDomainReset): the guest restarts at once, without shutting down.
    RESET = "reset"
    # The screen as a PNG (base64 in the reply's `png`), what virt-api's vnc/screenshot answers.
    SCREENSHOT = "screenshot"
    DELETE = "delete"
    # Guest filesystems frozen and thawed through the agent (cmd.proto's FreezeVirtualMachine, UnfreezeVirtualMachine),
    # what a VM snapshot of a running guest asks for; a freeze thaws by itself after `unfreezeTimeoutSeconds`.
    FREEZE = "freeze"
    UNFREEZE = "unfreeze"
    # Keeps the connection open; the launcher streams a Status on every domain change.
    WATCH = "watch"
    # Mount the hotplugged claims handed over, attach those ready to the running domain, detach those gone.
    HOTPLUG = "hotplug"
    # Live migration (cmd.proto's SyncMigrationTarget, MigrateVMI, CancelVirtualMachineMigration): prepare this
    # launcher to receive the VMI, send the domain to a prepared target, abort the outgoing migration, and read the
    # migration job's progress (libvirt's jobInfo).
    PREPARE_MIGRATION_TARGET = "preparemigrationtarget"
    MIGRATE = "migrate"
    CANCEL_MIGRATION = "cancelmigration"
    MIGRATION_STATUS = "migrationstatus"
    # CPU and memory hotplug after a hotplug migration (cmd.proto's SyncVirtualMachineCPUs, SyncVirtualMachineMemory):
    # enable the VMI's vCPUs, resize the virtio-mem device to its guest memory.
    SYNC_VCPUS = "syncvcpus"
    SYNC_MEMORY = "syncmemory"
    # What the guest agent reported (cmd.proto's GetGuestInfo, GetUsers, GetFilesystems); added in version 1.
    GUEST_INFO = "guestinfo"
    USER_LIST = "userlist"
    FILESYSTEM_LIST = "filesystemlist"
    # The domain's libvirt bulk stats, for virt-handler's /metrics (cmd.proto's GetDomainStats); added in version 1.
    # Its reply's optional `migrationJob` (a running outgoing migration's job statistics) was added in version 1
    # too: a new optional reply field changes no other field's meaning, and a handler that does not know it skips it.
    DOMAIN_STATS = "domainstats"


# Domain states by the names KubeVirt reports them (virtwrap/api LifeCycle).
NO_STATE: Final = "NoState"
RUNNING: Final = "Running"
BLOCKED: Final = "Blocked"
PAUSED: Final = "Paused"
SHUTTING_DOWN: Final = "ShuttingDown"
SHUTOFF: Final = "Shutoff"
CRASHED: Final = "Crashed"
PM_SUSPENDED: Final = "PMSuspended"
UNKNOWN_REASON: Final = "Unknown"

# A guest is up in these states (KubeVirt's domainAlive); in STOPPED_STATES it has ended, in NO_STATE it never began.
ALIVE_STATES: Final = frozenset({RUNNING, BLOCKED, PAUSED, SHUTTING_DOWN, PM_SUSPENDED})
STOPPED_STATES: Final = frozenset({SHUTOFF, CRASHED})


class MigrationRequest(TypedDict, total=False):
    """`migrate` and `preparemigrationtarget`: where the target listens and the cluster's migration settings."""

    # preparemigrationtarget: the address incoming migration streams bind (the node's migration address).
    listenAddress: str
    # migrate: the VMIM's uid (KubeVirt's migrationState.migrationUid), echoed in the source's status.
    migrationUid: str
    # migrate: the target's libvirt, the URI its QEMU listens on, and where its block-copy (NBD) server is.
    targetUri: str
    migrationUri: str
    disksUri: str
    blockMigration: bool
    # Volumes on shared storage, which a block migration leaves alone.
    sharedVolumes: list[str]
    bandwidthMiB: int
    completionTimeoutPerGiB: int
    progressTimeout: int
    allowAutoConverge: bool
    allowPostCopy: bool
    unsafe: bool


class MigrationStatus(TypedDict, total=False):
    """A launcher's side of a migration, in the words of KubeVirt's VMI migrationState where they exist."""

    role: str
    # Source: the migration this status answers for (a pod that was the target of the last one migrates again).
    migrationUid: str
    # Source: Running, Succeeded, Failed. Target: TargetReady, then Succeeded once the domain runs here.
    state: str
    startTimestamp: str
    endTimestamp: str
    completed: bool
    failed: bool
    failureReason: str
    abortRequested: bool
    abortStatus: str
    migrateDisks: list[str]
    # PostCopy once the monitor switched an overdue migration (the policy's allowPostCopy); absent means pre-copy.
    mode: str
    # libvirt's job statistics (jobStats names).
    progress: dict[str, int]
    # Target: where the source sends the domain.
    libvirtSocket: str
    migrationAddress: str
    disksPort: int
    # Target: the host directory where this pod's QEMU listens for the proxied streams (unix sockets).
    proxyDir: str
    targetNodeDomainReadyTimestamp: str


class DomainStatus(TypedDict):
    """The launcher's one domain."""

    state: str
    reason: str
    defined: bool
    name: str


class Status(TypedDict):
    """What `status`, `sync`, `kill`, `pause`, `unpause`, `softreboot`, `delete` answer, and what `watch` streams."""

    protocolVersion: int
    domain: DomainStatus
    vmiUid: str
    markedForGracefulShutdown: bool
    emulation: bool
    pid: int
    # The libvirt lifecycle event that caused a watch update.
    event: NotRequired[str]
    # Only once the domain is defined.
    interfaces: NotRequired[list[dict[str, Any]]]
    # Why a masquerade interface fell back to QEMU user networking (the pod has no network namespace of its own).
    networkFallback: NotRequired[str]
    # Once a migration was prepared (target) or started (source).
    migration: NotRequired[MigrationStatus]
    # The host directory this launcher's libvirt sees at `pod_layout.MIGRATION_PROXY_DIR` (a private daemon sees its
    # pod's own): where the source handler must listen for this launcher's outgoing migration.
    migrationProxyDir: NotRequired[str]
    # Once the domain runs: the agent channel's state and what the agent said (launcher/guest_agent_info.py).
    guestAgent: NotRequired[dict[str, Any]]
    # qemuGuestAgent access credentials: {succeeded, message} of the last propagation round.
    accessCredential: NotRequired[dict[str, Any]]
    # The guest's memory now in bytes (libvirt's currentMemory: boot memory plus what virtio-mem has plugged).
    currentMemory: NotRequired[int]
    # Once the guest panicked: {count, message, type, bugcheckCode} (launcher/guest_panic.py).
    guestPanic: NotRequired[dict[str, Any]]


class ShutdownReply(Status):
    """`shutdown` also says whether there was a domain to send the ACPI power button to."""

    signaled: bool


class HotplugReply(Status):
    """`hotplug`: the volumes now mounted into the launcher, and the hotplugged disks of the domain by target."""

    mounted: list[str]
    attached: dict[str, str]
    # Attachments or detachments that failed (libvirt's reasons); the rest was done.
    errors: list[str]
    # The last memory dump asked for: fileName, startTimestamp, and once it ended endTimestamp, completed, failed
    # and failureReason (KubeVirt's MemoryDumpMetadata). Optional: a handler that does not know it skips it.
    memoryDump: NotRequired[dict[str, Any]]


class PingReply(TypedDict):
    protocolVersion: int
    pid: int


class Request(TypedDict):
    cmd: str
    protocolVersion: int
    id: NotRequired[int]
    # `sync`, `hotplug`, `syncvcpus`, `syncmemory`: the VMI the domain is made from.
    vmi: NotRequired[dict[str, Any]]
    # `hotplug` only: volume name → {"path": host path of the claim's directory, file or device}; a memory dump
    # volume's entry may name the file to dump the guest's memory into ({"memoryDump": file name}).
    hotplug: NotRequired[dict[str, dict[str, Any]]]
    # `migrate` and `preparemigrationtarget`.
    migration: NotRequired[MigrationRequest]
    # `screenshot`: nudge the pointer first, waking a screen saver (KubeVirt's moveCursor).
    moveCursor: NotRequired[bool]
    # `freeze`: thaw again after this many seconds unless unfrozen first (0: never).
    unfreezeTimeoutSeconds: NotRequired[int]


class ErrorReply(TypedDict):
    ok: bool
    error: str
    protocolVersion: int
    id: NotRequired[int | None]


class ProtocolMismatch(Exception):
    """The peer speaks another protocol version (or none: a launcher from before versioning)."""

    def __init__(self, peer: str, version: object) -> None:
        shown = "no protocol version" if version is None else f"protocol version {version!r}"
        super().__init__(
            f"{peer} speaks {shown}, this side speaks version {PROTOCOL_VERSION}; "
            "virt-handler and virt-launcher must be upgraded together"
        )
        self.version = version


def request(
    command: Command | str,
    *,
    vmi: dict[str, Any] | None = None,
    request_id: int | None = None,
    hotplug: dict[str, dict[str, Any]] | None = None,
    migration: MigrationRequest | None = None,
    move_cursor: bool | None = None,
    unfreeze_timeout: int | None = None,
) -> Request:
    """A request of this protocol version."""
    message: Request = {"cmd": str(command), "protocolVersion": PROTOCOL_VERSION}
    if request_id is not None:
        message["id"] = request_id
    if vmi is not None:
        message["vmi"] = vmi
    if hotplug is not None:
        message["hotplug"] = hotplug
    if migration is not None:
        message["migration"] = migration
    if move_cursor is not None:
        message["moveCursor"] = move_cursor
    if unfreeze_timeout is not None:
        message["unfreezeTimeoutSeconds"] = unfreeze_timeout
    return message


def error_reply(message: str, request_id: int | None = None) -> ErrorReply:
    reply: ErrorReply = {"ok": False, "error": message, "protocolVersion": PROTOCOL_VERSION}
    if request_id is not None:
        reply["id"] = request_id
    return reply


def encode(message: object) -> bytes:
    """One protocol line."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """A line read from the peer as a JSON object; ValueError when it is not one."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a protocol line must be a JSON object")
    return message


def parse_request(message: dict[str, Any]) -> Request:
    """A decoded request with its fields checked for type (a `vmi` that is not an object is dropped)."""
    request: Request = {"cmd": str(message.get("cmd", "")), "protocolVersion": int(message["protocolVersion"])}
    if isinstance(message.get("id"), int):
        request["id"] = message["id"]
    if isinstance(message.get("vmi"), dict):
        request["vmi"] = message["vmi"]
    hotplug = message.get("hotplug")
    if isinstance(hotplug, dict):
        request["hotplug"] = {str(k): v for k, v in hotplug.items() if isinstance(v, dict)}
    migration = message.get("migration")
    if isinstance(migration, dict):
        request["migration"] = parse_migration(migration)
    if isinstance(message.get("moveCursor"), bool):
        request["moveCursor"] = message["moveCursor"]
    return request


_MIGRATION_FIELDS: dict[str, type] = {
    "listenAddress": str,
    "targetUri": str,
    "migrationUri": str,
    "disksUri": str,
    "blockMigration": bool,
    "bandwidthMiB": int,
    "completionTimeoutPerGiB": int,
    "progressTimeout": int,
    "allowAutoConverge": bool,
    "allowPostCopy": bool,
    "unsafe": bool,
}


def parse_migration(value: dict[str, Any]) -> MigrationRequest:
    """A migration request with each field of the right type (others dropped)."""
    checked: dict[str, Any] = {}
    for key, kind in _MIGRATION_FIELDS.items():
        item = value.get(key)
        if isinstance(item, kind) and (kind is bool or not isinstance(item, bool)):
            checked[key] = item
    shared = value.get("sharedVolumes")
    if isinstance(shared, list):
        checked["sharedVolumes"] = [str(v) for v in shared]
    request: MigrationRequest = {}
    request.update(checked)  # type: ignore[typeddict-item]
    return request


def check_version(message: dict[str, Any], peer: str) -> None:
    """Raise ProtocolMismatch unless `message` was written by a peer of this protocol version."""
    version = message.get("protocolVersion")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolMismatch(peer, version)


def domain_name(namespace: str, name: str) -> str:
    """`<namespace>_<name>`, the name KubeVirt gives a VMI's libvirt domain (VMINamespaceKeyFunc)."""
    return f"{namespace or 'default'}_{name}"
