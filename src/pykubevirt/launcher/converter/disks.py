"""`<disk>` elements: device kind, bus and target naming, driver policy, IO threads, and each volume source's file."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from pykubevirt.api.json_lookup import get
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import AttrValue, Element, element, sub

BUS_PREFIX = {"virtio": "vd", "sata": "sd", "scsi": "sd", "usb": "sd"}
ERROR_POLICIES = ("stop", "ignore", "report", "enospace")
HOTPLUG_READY_PHASES = ("MountedToPod", "Ready")
SUPPLEMENTAL_POOL = "supplementalPool"
PR_HELPER_SOCKET = "daemons/pr/pr-helper.sock"
DOWNWARD_METRICS_DISK = "downwardapi-disks/vhostmd0"
# Volume kinds whose ISO the launcher renders from Kubernetes objects, under the private dir.
CONFIG_DISK_DIRS = {"configMap": "config-map-disks", "secret": "secret-disks", "downwardAPI": "downwardapi-disks"}
SYSPREP_DISK_DIR = "sysprep-disks"
SERVICE_ACCOUNT_DISK = "service-account-disk/service-account.iso"
CLOUD_INIT_ISOS = {"cloudInitNoCloud": "noCloud.iso", "cloudInitConfigDrive": "configdrive.iso"}


# ------------------------------------------------------------------------------------------------ IO threads


@dataclass(frozen=True, slots=True)
class IOThreadPlan:
    """How many `<iothreads>` the domain gets and how virtio disks share them (KubeVirt's numbering)."""

    total: int = 0
    auto: int = 0
    supplemental: int = 0


def _dedicated(disk: v.Obj) -> bool:
    return bool(disk.get("dedicatedIOThread"))


def _pool_limit(vmi: v.Obj) -> int:
    """Shared (or no) policy: one shared thread; auto: two per requested CPU."""
    dom = v.domain(vmi)
    policy = dom.get("ioThreadsPolicy")
    if policy in (None, "shared"):
        return 1
    if policy == "auto":
        cpu = v.mapping(dom, "cpu")
        if cpu.get("dedicatedCpuPlacement") and cpu.get("isolateEmulatorThread"):
            return 1
        requests = v.mapping(dom, "resources", "requests")
        limits = v.mapping(dom, "resources", "limits")
        cpus = 1
        if "cpu" in requests:
            cpus = v.ceil_value(requests["cpu"], "resources.requests.cpu")
        elif "cpu" in limits:
            cpus = v.ceil_value(limits["cpu"], "resources.limits.cpu")
        return cpus * 2
    return 0


def io_thread_plan(vmi: v.Obj) -> IOThreadPlan:
    dom = v.domain(vmi)
    disks = v.items(dom, "devices", "disks")
    if dom.get("ioThreadsPolicy") is None and not any(_dedicated(d) for d in disks):
        return IOThreadPlan()
    pool = get(dom, "ioThreads", "supplementalPoolThreadCount")
    if dom.get("ioThreadsPolicy") == SUPPLEMENTAL_POOL and pool is not None:
        return IOThreadPlan(total=int(pool), auto=0, supplemental=int(pool))
    dedicated = sum(1 for d in disks if _dedicated(d))
    auto = len(disks) - dedicated
    limit = _pool_limit(vmi)
    if auto + dedicated > limit:
        auto = max(limit - dedicated, 1)
    return IOThreadPlan(total=auto + dedicated, auto=auto)


@dataclass(slots=True)
class _ThreadCursor:
    """The next auto (shared, round-robin) and dedicated thread ids, dedicated ones numbered after the auto pool."""

    plan: IOThreadPlan
    auto: int = 1
    dedicated: int = 0

    def __post_init__(self) -> None:
        self.dedicated = self.plan.auto + 1

    def assign(self, disk: v.Obj, driver: Element) -> None:
        if self.plan.supplemental:
            pool = sub(driver, "iothreads")
            for thread_id in range(1, self.plan.supplemental + 1):
                sub(pool, "iothread", {"id": thread_id})
        elif _dedicated(disk):
            driver.set("iothread", str(self.dedicated))
            self.dedicated += 1
        else:
            driver.set("iothread", str(self.auto))
            self.auto = self.auto % self.plan.auto + 1


def scsi_controller_thread(vmi: v.Obj, plan: IOThreadPlan) -> int | None:
    """The auto thread the SCSI controller gets when a SCSI disk asks for a dedicated thread, else None."""
    disks = v.items(v.domain(vmi), "devices", "disks")
    if not plan.auto or not any(bus_of(d) == "scsi" and _dedicated(d) for d in disks):
        return None
    current = 1
    for disk in disks:
        if bus_of(disk) == "virtio" and not _dedicated(disk):
            current = current % plan.auto + 1
    return current


# ------------------------------------------------------------------------------------------------ naming


def bus_of(disk: v.Obj) -> str | None:
    for kind in ("disk", "lun", "cdrom"):
        target = disk.get(kind)
        if isinstance(target, dict):
            return str(target.get("bus") or "")
    return None


def device_name(prefix: str, index: int) -> str:
    """a…z, aa…zz, aaa… like the kernel's sd/vd naming."""
    name = ""
    while index >= 0:
        name = chr(ord("a") + index % 26) + name
        index = index // 26 - 1
    return prefix + name


@dataclass(slots=True)
class _Namer:
    """Per-prefix target names in disk order; targets already recorded in volumeStatus are kept."""

    known: dict[str, str] = field(default_factory=dict)
    used: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def for_vmi(cls, vmi: v.Obj) -> _Namer:
        namer = cls()
        targets = {s.get("name"): s.get("target") for s in v.items(vmi, "status", "volumeStatus") if s.get("target")}
        for disk in v.items(v.domain(vmi), "devices", "disks"):
            bus = bus_of(disk)
            name = disk.get("name")
            if bus in BUS_PREFIX and name in targets:
                namer.known[str(name)] = str(targets[name])
                namer.used.setdefault(BUS_PREFIX[bus], set()).add(str(targets[name]))
        return namer

    def name(self, disk_name: str, bus: str) -> tuple[str, int]:
        """The target and its index (the SCSI unit)."""
        prefix = BUS_PREFIX.get(bus)
        if prefix is None:
            raise ConversionError(f"disk {disk_name} has an unrecognized bus '{bus}'")
        used = self.used.setdefault(prefix, set())
        known = self.known.get(disk_name)
        index = 0
        while True:
            candidate = device_name(prefix, index)
            if known is not None and candidate == known:
                return known, index
            if known is None and candidate not in used:
                self.known[disk_name] = candidate
                used.add(candidate)
                return candidate, index
            index += 1
            if index >= 26**3:
                raise ConversionError(f"no free target name for disk {disk_name}")


# ------------------------------------------------------------------------------------------------ volumes


@dataclass(slots=True)
class _Disk:
    """What a volume contributes: source type and attributes, image format, backing store, discard."""

    kind: str = "file"
    source: dict[str, str] = field(default_factory=dict)
    fmt: str = "raw"
    discard: bool = False
    backing: tuple[str, str, str] | None = None  # (type, format, path)
    readonly: bool = False
    replace_driver: bool = False


def _pvc_source(name: str, ctx: ConverterContext, hotplug: bool) -> _Disk:
    discard = name not in ctx.preallocated_volumes
    if name in ctx.block_volumes:
        base = posixpath.join(ctx.share_dir, "hotplug-disks") if hotplug else ctx.block_device_dir
        source = {"dev": posixpath.join(base, name)}
        if not hotplug:
            source["name"] = name
        return _Disk(kind="block", source=source, discard=discard)
    path = (
        posixpath.join(ctx.share_dir, "hotplug-disks", f"{name}.img")
        if hotplug
        else posixpath.join(ctx.pvc_disk_dir, name, "disk.img")
    )
    return _Disk(source={"file": path}, discard=discard)


# The files below are written by the launcher before conversion; these functions are the one place naming them.


def ephemeral_overlay(name: str, ctx: ConverterContext) -> str:
    """The qcow2 overlay of a containerDisk or ephemeral volume."""
    return posixpath.join(ctx.ephemeral_disk_dir, "disk-data", name, "disk.qcow2")


def empty_disk_path(name: str, ctx: ConverterContext) -> str:
    return posixpath.join(ctx.libvirt_runtime_dir, "empty-disks", f"{name}.qcow2")


def cloud_init_source(volume: v.Obj) -> str | None:
    """The volume's cloud-init source key (`cloudInitNoCloud`/`cloudInitConfigDrive`), None for other volumes."""
    return next((key for key in CLOUD_INIT_ISOS if volume.get(key) is not None), None)


def cloud_init_iso(vmi: v.Obj, source: str, ctx: ConverterContext) -> str:
    """The ISO of the VMI's `source` cloud-init volume (KubeVirt's GetIsoFilePath)."""
    meta = v.mapping(vmi, "metadata")
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    return posixpath.join(ctx.ephemeral_disk_dir, "cloud-init-data", namespace, name, CLOUD_INIT_ISOS[source])


def volume_source(vmi: v.Obj, volume: v.Obj, ctx: ConverterContext, device: str, hotplug: bool) -> _Disk:
    name = str(volume.get("name"))
    if device == "lun" and not any(volume.get(k) is not None for k in ("persistentVolumeClaim", "dataVolume")):
        raise ConversionError(f"device {name} is of type lun. Not compatible with a file based disk")
    if hotplug:
        if not any(volume.get(k) is not None for k in ("persistentVolumeClaim", "dataVolume", "hostDisk")):
            raise ConversionError(f"hotplug disk {name} references an unsupported source")
        return _pvc_source(name, ctx, hotplug=True)
    if volume.get("containerDisk") is not None:
        if name not in ctx.container_disks:
            raise ConversionError(f"no disk info provided for volume {name}")
        backing_path, backing_fmt = ctx.container_disks[name]
        return _Disk(
            source={"file": ephemeral_overlay(name, ctx)},
            fmt="qcow2",
            discard=True,
            backing=("file", backing_fmt, backing_path),
        )
    cloud_init = cloud_init_source(volume)
    if cloud_init is not None:
        return _Disk(source={"file": cloud_init_iso(vmi, cloud_init, ctx)})
    if volume.get("sysprep") is not None:
        return _Disk(source={"file": posixpath.join(ctx.private_dir, SYSPREP_DISK_DIR, f"{name}.iso")})
    host_disk = volume.get("hostDisk")
    if isinstance(host_disk, dict):
        # The launcher mounts the host directory at the PVC location and keeps the file's own name.
        base = posixpath.basename(str(host_disk.get("path") or ""))
        return _Disk(source={"file": posixpath.join(ctx.pvc_disk_dir, name, base)})
    if volume.get("persistentVolumeClaim") is not None or volume.get("dataVolume") is not None:
        src = _pvc_source(name, ctx, hotplug=False)
        # A claim mounted readOnly is a read-only disk to the guest (KubeVirt's Convert_v1_Volume_To_api_Disk).
        src.readonly = bool((volume.get("persistentVolumeClaim") or {}).get("readOnly"))
        return src
    if volume.get("ephemeral") is not None:
        backing = _pvc_source(name, ctx, hotplug=False)
        path = backing.source.get("file") or backing.source["dev"]
        return _Disk(
            source={"file": ephemeral_overlay(name, ctx)},
            fmt="qcow2",
            discard=True,
            backing=(backing.kind, "raw", path),
        )
    if volume.get("emptyDisk") is not None:
        return _Disk(source={"file": empty_disk_path(name, ctx)}, fmt="qcow2", discard=True)
    for key, directory in CONFIG_DISK_DIRS.items():
        if volume.get(key) is not None:
            return _Disk(source={"file": posixpath.join(ctx.private_dir, directory, f"{name}.iso")})
    if volume.get("serviceAccount") is not None:
        return _Disk(source={"file": posixpath.join(ctx.private_dir, SERVICE_ACCOUNT_DISK)})
    if volume.get("downwardMetrics") is not None:
        path = posixpath.join(ctx.private_dir, DOWNWARD_METRICS_DISK)
        return _Disk(source={"file": path}, readonly=True, replace_driver=True)
    raise ConversionError(f"disk {name} references an unsupported source")


# ------------------------------------------------------------------------------------------------ disks


def _target(disk: v.Obj, namer: _Namer) -> tuple[str, dict[str, str | None], int, bool]:
    """Device kind, target attributes, SCSI unit, and whether the guest sees it read-only."""
    name = str(disk.get("name"))
    if isinstance(disk.get("disk"), dict):
        bus = str(disk["disk"].get("bus") or "")
        dev, unit = namer.name(name, bus)
        return "disk", {"bus": bus, "dev": dev}, unit, bool(disk["disk"].get("readonly"))
    if isinstance(disk.get("lun"), dict):
        bus = str(disk["lun"].get("bus") or "")
        dev, unit = namer.name(name, bus)
        return "lun", {"bus": bus, "dev": dev}, unit, bool(disk["lun"].get("readonly"))
    if isinstance(disk.get("cdrom"), dict):
        cdrom = disk["cdrom"]
        bus = str(cdrom.get("bus") or "")
        dev, unit = namer.name(name, bus)
        return (
            "cdrom",
            {"bus": bus, "dev": dev, "tray": cdrom.get("tray") or None},
            unit,
            v.flag(cdrom.get("readonly"), True),
        )
    raise ConversionError(f"disk {name} has no disk, lun or cdrom target")


def _cache_and_io(
    name: str, block: bool, cache: str | None, io: str | None, ctx: ConverterContext
) -> tuple[str, str | None]:
    """KubeVirt's launcher step after conversion: cache none when O_DIRECT works, io native for block/preallocated."""
    if not cache:
        cache = "none" if ctx.direct_io else "writethrough"
    elif cache == "none" and not ctx.direct_io:
        raise ConversionError(
            f"Unable to use 'none' cache mode, file system where {name} is stored does not support direct I/O"
        )
    if not io and cache == "none" and (block or name in ctx.preallocated_volumes):
        io = "native"
    return cache, io


def _driver(disk: v.Obj, device: str, src: _Disk, ctx: ConverterContext) -> dict[str, AttrValue]:
    name = str(disk.get("name"))
    # downwardMetrics replaces the driver: the user's cache and io settings do not apply to it.
    cache = None if src.replace_driver else disk.get("cache") or None
    io = None if src.replace_driver else disk.get("io") or None
    if device == "disk" and disk.get("shareable"):
        if cache not in (None, "none"):
            raise ConversionError(f"a sharable disk requires cache = none got: {cache}")
        cache = "none"
    if src.source:  # an empty CD-ROM has no file to cache
        cache, io = _cache_and_io(name, src.kind == "block", cache, io, ctx)
    error_policy = disk.get("errorPolicy") or "stop"
    if error_policy not in ERROR_POLICIES:
        raise ConversionError(f"error policy {error_policy} not recognized")
    return {"cache": cache, "error_policy": error_policy, "io": io, "name": "qemu", "type": src.fmt}


def _discard(disk: v.Obj, device: str, src: _Disk, ctx: ConverterContext) -> bool:
    """Disks and LUNs pass guest TRIM down unless preallocated; overlays always do."""
    if src.replace_driver:
        return False
    return src.discard or (device in ("disk", "lun") and disk.get("name") not in ctx.preallocated_volumes)


def _volume_status(vmi: v.Obj) -> tuple[dict[str, v.Obj], set[str]]:
    hotplug: dict[str, v.Obj] = {}
    permanent: set[str] = set()
    for status in v.items(vmi, "status", "volumeStatus"):
        if status.get("hotplugVolume") is not None:
            hotplug[str(status.get("name"))] = status
        else:
            permanent.add(str(status.get("name")))
    return hotplug, permanent


def _source(disk_el: Element, disk: v.Obj, device: str, src: _Disk, ctx: ConverterContext) -> None:
    source_el = sub(disk_el, "source", src.source) if src.source else None
    if device == "lun" and get(disk, "lun", "reservation"):
        # SCSI persistent reservations go through KubeVirt's pr-helper daemon socket.
        source_el = source_el if source_el is not None else sub(disk_el, "source")
        reservations = sub(source_el, "reservations", {"managed": "no", "migration": "yes"})
        path = posixpath.join(ctx.share_dir, PR_HELPER_SOCKET)
        sub(reservations, "source", {"type": "unix", "path": path, "mode": "client"})


def build_disks(vmi: v.Obj, ctx: ConverterContext, plan: IOThreadPlan) -> list[Element]:
    devs = v.devices(vmi)
    volumes = {str(vol.get("name")): vol for vol in v.items(vmi, "spec", "volumes")}
    namer = _Namer.for_vmi(vmi)
    cursor = _ThreadCursor(plan)
    queues = v.topology(vmi).vcpus if devs.get("blockMultiQueue") else None
    hotplug, permanent = _volume_status(vmi)
    result: list[Element] = []
    for disk in v.items(devs, "disks"):
        name = str(disk.get("name"))
        device, target, unit, readonly = _target(disk, namer)
        bus = target["bus"]
        volume = volumes.get(name)
        if volume is None:
            if device != "cdrom":
                raise ConversionError(f"no matching volume with name {name} found")
            src = _Disk(kind="block", discard=True)  # an empty CD-ROM tray: no medium
        else:
            status = hotplug.get(name)
            src = volume_source(vmi, volume, ctx, device, hotplug=status is not None)
            # A hotplugged volume is attached once mounted into the pod; with no volume status yet, all are permanent.
            hotplug_ready = status is not None and status.get("phase") in HOTPLUG_READY_PHASES
            if not (name in permanent or not permanent or hotplug_ready):
                continue
        disk_el = element("disk", {"device": device, "type": src.kind})
        if device == "disk" and bus == "virtio":
            disk_el.set("model", v.virtio_model(vmi))
        _source(disk_el, disk, device, src, ctx)
        sub(disk_el, "target", target)
        if disk.get("serial") and device == "disk":
            sub(disk_el, "serial", text=str(disk["serial"]))
        driver = sub(disk_el, "driver", _driver(disk, device, src, ctx))
        if plan.total and bus == "virtio":
            cursor.assign(disk, driver)
        if queues is not None and bus == "virtio":
            driver.set("queues", str(queues))
        if _discard(disk, device, src, ctx):
            driver.set("discard", "unmap")
        if readonly or src.readonly:
            sub(disk_el, "readonly")
        sub(disk_el, "alias", {"name": f"ua-{name}"})
        if src.backing is not None:
            kind, fmt, path = src.backing
            store = sub(disk_el, "backingStore", {"type": kind})
            sub(store, "format", {"type": fmt})
            sub(store, "source", {"dev" if kind == "block" else "file": path})
        if disk.get("bootOrder") is not None:
            sub(disk_el, "boot", {"order": int(disk["bootOrder"])})
        _address(disk, device, bus, unit, disk_el)
        _block_io(disk, disk_el)
        if device == "disk" and disk.get("shareable"):
            sub(disk_el, "shareable")
        result.append(disk_el)
    return result


def _address(disk: v.Obj, device: str, bus: str | None, unit: int, disk_el: Element) -> None:
    name = str(disk.get("name"))
    pci = get(disk, "disk", "pciAddress") if device == "disk" else None
    if pci:
        if bus != "virtio":
            raise ConversionError(f"setting a pci address is not allowed for non-virtio bus types, for disk {name}")
        sub(disk_el, "address", v.pci_address(str(pci), f"disk {name}"))
    elif bus == "scsi" and device in ("disk", "lun"):
        sub(disk_el, "address", {"type": "drive", "controller": "0", "bus": "0", "unit": unit})


def _block_io(disk: v.Obj, disk_el: Element) -> None:
    # matchVolume needs the block sizes of the backing storage, which only the launcher can read.
    custom = get(disk, "blockSize", "custom")
    if isinstance(custom, dict):
        sub(
            disk_el,
            "blockio",
            {
                "logical_block_size": custom.get("logical"),
                "physical_block_size": custom.get("physical"),
                "discard_granularity": custom.get("discardGranularity"),
            },
        )
