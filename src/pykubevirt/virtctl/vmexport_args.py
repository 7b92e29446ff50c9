"""`virtctl vmexport`'s flags and their checks (pkg/virtctl/vmexport: handle{Create,Delete,Download}Flags and
initVMExportInfo), in KubeVirt's order and words, without any cluster access."""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from pykubevirt.api import constants as c
from pykubevirt.api.go_duration import GoDurationError, go_duration_nanoseconds
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.image_upload import open_error

CREATE, DELETE, DOWNLOAD = "create", "delete", "download"
GZIP_FORMAT, RAW_FORMAT, OCI_FORMAT = "gzip", "raw", "oci"
OUTPUT_FORMAT_JSON, OUTPUT_FORMAT_YAML = "json", "yaml"
DEFAULT_READINESS_TIMEOUT = 120.0
TEMPLATE_GROUP = "template.kubevirt.io"

# The source flags, as the export's spec.source names them (KubeVirt's getExportSource, in its order).
SOURCES = (
    ("vm", c.KUBEVIRT_GROUP, "VirtualMachine"),
    ("snapshot", c.SNAPSHOT_GROUP, "VirtualMachineSnapshot"),
    ("pvc", "", "PersistentVolumeClaim"),
    ("vmtemplate", TEMPLATE_GROUP, "VirtualMachineTemplate"),
)
# cobra's MarkFlagsMutuallyExclusive groups, keyed as cobra keys them (the names joined), checked in sorted order.
EXCLUSIVE_GROUPS = (("vm", "snapshot", "pvc", "vmtemplate"), ("keep-vme", "delete-vme"))

ERR_REQUIRED_EXPORT_TYPE = (
    "need to specify export kind when attempting to create a VirtualMachineExport [--pvc|--vm|--snapshot|--vmtemplate]"
)
ERR_INCOMPATIBLE_EXPORT_TYPE = "should not specify export kind"
BINARY_OUTPUT = (
    "warning: Binary output can mess up your terminal. Use '--output -' to output into stdout anyway or consider "
    "'--output <FILE>' to save to a file"
)
# What this cluster does not serve, each refused in one line after KubeVirt's own checks pass.
TEMPLATE_NOT_SERVED = (
    "VirtualMachineTemplate (template.kubevirt.io) is not served by this cluster: there is no template to export"
)
OCI_NOT_SERVED = (
    "OCI export (--format=oci) is not served by this cluster: download a volume with --format=gzip or "
    "--format=raw, or the VM's manifests with --manifest"
)
PORT_FORWARD_NOT_SUPPORTED = (
    "port-forwarding is not supported by this cluster (its export server pods have no Service network): "
    "download through the export's external link, without --port-forward"
)


def incompatible(flag: str, other: str) -> str:
    return f"the '{flag}' flag is incompatible with '{other}'"


def invalid_value(flag: str, acceptable: str) -> str:
    return f"{flag} is not a valid value, acceptable values are {acceptable}"


class _StringSlice(argparse.Action):
    """pflag's StringSliceVar: each use is CSV, the first replaces the default and later ones append."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.extend(next(csv.reader([str(values)]), []))
        setattr(namespace, self.dest, items)


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    # One list, counted by check_args (cobra's ExactArgs(2)), wherever the words stand among the flags.
    cmd.add_argument("positionals", nargs="*", metavar="create|delete|download NAME")
    add = cmd.add_argument
    # None until given, so that `--vm=` still counts as set, as pflag's Changed does for the exclusive group.
    add("--vm", default=None, help="Sets VirtualMachine as vmexport kind and specifies the vm name.")
    add(
        "--snapshot", default=None, help="Sets VirtualMachineSnapshot as vmexport kind and specifies the snapshot name."
    )
    add("--pvc", default=None, help="Sets PersistentVolumeClaim as vmexport kind and specifies the PVC name.")
    add(
        "--vmtemplate",
        default=None,
        help="Sets VirtualMachineTemplate as vmexport kind and specifies the template name.",
    )
    add("--output", default="", help="Specifies the output path of the volume to be downloaded.")
    add("--volume", default="", help="Specifies the volume to be downloaded.")
    add(
        "--format",
        default="",
        help="Used to specify the format of the downloaded image. There's two options: gzip (default) and raw.",
    )
    add(
        "--insecure",
        action="store_true",
        help="When used with the 'download' option, specifies that the http request should be insecure.",
    )
    add(
        "--keep-vme",
        action="store_true",
        help="When used with the 'download' option, specifies that the vmexport object should always be retained "
        "after the download finishes.",
    )
    add(
        "--delete-vme",
        action="store_true",
        help="When used with the 'download' option, specifies that the vmexport object should always be deleted "
        "after the download finishes.",
    )
    add(
        "--ttl",
        default="",
        help="The time after the export was created that it is eligible to be automatically deleted, defaults to "
        "2 hours by the server side if not specified",
    )
    add(
        "--manifest-output-format",
        default="",
        help="Manifest output format, defaults to Yaml. Valid options are yaml or json",
    )
    add(
        "--service-url",
        default="",
        help="Specify service url to use in the returned manifest, instead of the external URL in the Virtual "
        "Machine export status. This is useful for NodePorts or if you don't have an external URL configured",
    )
    add(
        "--port-forward",
        action="store_true",
        help="Configures port-forwarding on a random port. Useful to download without proper ingress/route "
        "configuration",
    )
    add("--local-port", default="0", help="Defines the specific port to be used in port-forward.")
    # An int as pflag's IntVar: parsed (with pflag's error text) by check_args, not by argparse.
    add(
        "--retry",
        default="0",
        help="When export server returns a transient error, we retry this number of times before giving up",
    )
    add(
        "--include-secret",
        action="store_true",
        help="When used with manifest and set to true include a secret that contains proper headers for CDI to "
        "import using the manifest",
    )
    add("--manifest", action="store_true", help="Instead of downloading a volume, retrieve the VM manifest")
    add(
        "--labels",
        default=[],
        action=_StringSlice,
        help="Specify custom labels to VM export object and its associated pod",
    )
    add(
        "--annotations",
        default=[],
        action=_StringSlice,
        help="Specify custom annotations to VM export object and its associated pod",
    )
    add("--readiness-timeout", default="", help="Specify maximum wait for VM export object to be ready")


@dataclass
class VMExportInfo:
    """What one vmexport command works from (KubeVirt's VMExportInfo); `output` is None for standard output."""

    function: str
    name: str
    namespace: str = ""
    source: dict[str, str] = field(default_factory=dict)
    should_create: bool = False
    insecure: bool = False
    keep_vme: bool = False
    delete_vme: bool = False
    include_secret: bool = False
    export_manifest: bool = False
    decompress: bool = False
    output_file: str = ""
    output: BinaryIO | None = None
    volume_name: str = ""
    output_format: str = ""
    service_url: str = ""
    ttl: str = ""
    retries: int = 0
    readiness_timeout: float = DEFAULT_READINESS_TIMEOUT
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # With the data on standard output, the lines about the export go to standard error instead.
    messages_to_stderr: bool = False

    def say(self, text: str) -> None:
        print(text, file=sys.stderr if self.messages_to_stderr else sys.stdout, flush=True)

    def close(self) -> None:
        if self.output is not None:
            self.output.close()
            self.output = None


# ------------------------------------------------------------------------------------------------- Go's parsers

_GO_INT = re.compile(
    r"0[xX]_?[0-9a-fA-F]+(_[0-9a-fA-F]+)*|0[oO]_?[0-7]+(_[0-7]+)*|0[bB]_?[01]+(_[01]+)*|[0-9]+(_[0-9]+)*"
)
_INT64 = 1 << 63


def parse_int(flag: str, value: str) -> int:
    """pflag's IntVar: strconv.ParseInt(value, 0, 64), with pflag's invalid-argument text."""
    body = value[1:] if value[:1] in ("+", "-") else value
    cause = "invalid syntax"
    if _GO_INT.fullmatch(body):
        digits = body.replace("_", "")
        octal = len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()
        try:
            number = int(digits, 8 if octal else 0)
        except ValueError:  # "08": a leading 0 makes it octal for Go too
            number = None
        if number is not None:
            number = -number if value.startswith("-") else number
            if -_INT64 <= number < _INT64:
                return number
            cause = "value out of range"
    raise VirtctlError(f'invalid argument "{value}" for "{flag}" flag: strconv.ParseInt: parsing "{value}": {cause}')


def parse_duration(text: str) -> int:
    """time.ParseDuration in nanoseconds, with Go's error texts."""
    try:
        return go_duration_nanoseconds(text)
    except GoDurationError as exc:
        raise VirtctlError(str(exc)) from None


def format_duration(nanoseconds: int) -> str:
    """time.Duration.String for a positive duration: `2m0s`, `1h30m0s`, `1.5s`, `250ms`, `10µs`, `5ns`."""
    if nanoseconds < 1000:
        return f"{nanoseconds}ns"
    if nanoseconds < 10**9:
        unit, scale = ("µs", 10**3) if nanoseconds < 10**6 else ("ms", 10**6)
        return _with_fraction(nanoseconds, scale) + unit
    hours, rest = divmod(nanoseconds, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    text = _with_fraction(rest, 10**9) + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def _with_fraction(value: int, scale: int) -> str:
    whole, fraction = divmod(value, scale)
    digits = str(fraction).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


# ----------------------------------------------------------------------------------------------------- checks


def _set(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest.replace("-", "_"))
    return value is not None and value is not False


def _check_exclusive_groups(args: argparse.Namespace) -> None:
    for group in sorted(EXCLUSIVE_GROUPS, key=" ".join):
        used = sorted(name for name in group if _set(args, name))
        if len(used) > 1:
            raise VirtctlError(
                f"if any flags in the group [{' '.join(group)}] are set none of the others can be; "
                f"[{' '.join(used)}] were all set"
            )


def _source_flags(args: argparse.Namespace) -> dict[str, str]:
    return {dest: getattr(args, dest) or "" for dest, _, _ in SOURCES}


def _check_not_for(function: str, args: argparse.Namespace, retries: int) -> None:
    """The download-only flags `create` and `delete` refuse, in KubeVirt's order."""
    refused: list[tuple[str, bool]] = [
        ("--output", args.output != ""),
        ("--volume", args.volume != ""),
        ("--insecure", args.insecure),
        ("--keep-vme", args.keep_vme),
        ("--delete-vme", args.delete_vme),
        ("--port-forward", args.port_forward),
        ("--local-port", args.local_port != "0"),
        ("--format", args.format != ""),
        ("--service-url", args.service_url != ""),
        ("--retry", retries != 0),
    ]
    if function == DELETE:
        refused += [
            ("--readiness-timeout", args.readiness_timeout != ""),
            ("--labels", bool(args.labels)),
            ("--annotations", bool(args.annotations)),
        ]
    for flag, used in refused:
        if used:
            raise VirtctlError(incompatible(flag, function))


def _check_download(args: argparse.Namespace, retries: int, sources: dict[str, str]) -> None:
    """handleDownloadFlags's checks, each with its text."""
    if args.port_forward:
        port = args.local_port[1:] if args.local_port[:1] in ("+", "-") else args.local_port
        if not port.isascii() or not port.isdigit() or not 0 <= int(args.local_port) <= 65535:
            raise VirtctlError(invalid_value("--local-port", "valid port numbers"))
    if args.format not in ("", GZIP_FORMAT, RAW_FORMAT, OCI_FORMAT):
        raise VirtctlError(invalid_value("--format", "gzip/raw/oci"))
    if args.format == OCI_FORMAT:
        for flag, used in (("--volume", args.volume), ("--manifest", args.manifest), ("--pvc", sources["pvc"])):
            if used:
                raise VirtctlError(incompatible(flag, "--format=oci"))
    if retries < 0:
        raise VirtctlError(invalid_value("--retry", "positive integers"))
    if args.manifest:
        if args.volume:
            raise VirtctlError(incompatible("--volume", "--manifest"))
        if args.manifest_output_format.lower() not in (OUTPUT_FORMAT_JSON, OUTPUT_FORMAT_YAML, ""):
            raise VirtctlError(invalid_value("--manifest-output-format", "json/yaml"))
        if sources["pvc"]:
            raise VirtctlError(incompatible("--pvc", "--manifest"))
    if not args.manifest and not args.output:
        raise VirtctlError(BINARY_OUTPUT)


def _check_served(function: str, args: argparse.Namespace, sources: dict[str, str]) -> None:
    # Refused before the output file is made or the cluster is asked: nothing could come of either.
    if function == DELETE:
        return
    if sources["vmtemplate"]:
        raise VirtctlError(TEMPLATE_NOT_SERVED)
    if args.format == OCI_FORMAT:
        raise VirtctlError(OCI_NOT_SERVED)
    if args.port_forward:
        raise VirtctlError(PORT_FORWARD_NOT_SUPPORTED)


def _key_values(items: list[str]) -> dict[str, str]:
    """convertSliceToMap: `key=value` items; one without `=` is dropped."""
    pairs = (item.split("=", 1) for item in items)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def export_source(sources: dict[str, str]) -> dict[str, str]:
    """getExportSource: the last source flag given wins (only one may be), as spec.source."""
    result: dict[str, str] = {}
    for dest, group, kind in SOURCES:
        if sources[dest]:
            result = {"apiGroup": group, "kind": kind, "name": sources[dest]}
    return result


def check_args(args: argparse.Namespace) -> VMExportInfo:
    """pflag's value parsing, cobra's argument count and flag groups, then parseExportArguments; opens the output."""
    retries = parse_int("--retry", str(args.retry))
    positionals: list[str] = list(args.positionals or [])
    if len(positionals) != 2:
        raise VirtctlError(f"accepts 2 arg(s), received {len(positionals)}")
    _check_exclusive_groups(args)
    function, name = positionals[0].lower(), positionals[1]
    sources = _source_flags(args)
    has_source = any(sources.values())
    if function == CREATE:
        if not has_source:
            raise VirtctlError(ERR_REQUIRED_EXPORT_TYPE)
        _check_not_for(CREATE, args, retries)
    elif function == DELETE:
        if has_source:
            raise VirtctlError(ERR_INCOMPATIBLE_EXPORT_TYPE)
        _check_not_for(DELETE, args, retries)
    elif function == DOWNLOAD:
        _check_download(args, retries, sources)
    else:
        raise VirtctlError(f"invalid function '{function}'")
    _check_served(function, args, sources)
    info = VMExportInfo(
        function=function,
        name=name,
        source=export_source(sources),
        should_create=function == DOWNLOAD and has_source,
        insecure=args.insecure,
        keep_vme=args.keep_vme,
        delete_vme=args.delete_vme,
        include_secret=args.include_secret,
        export_manifest=args.manifest,
        decompress=args.format == RAW_FORMAT,
        volume_name=args.volume,
        output_format=args.manifest_output_format.lower(),
        service_url=args.service_url,
        retries=retries,
        labels=_key_values(args.labels),
        annotations=_key_values(args.annotations),
    )
    if args.output and args.output != "-":
        info.output_file = args.output
        try:
            # Created here, before the cluster is asked anything, as KubeVirt's os.Create.
            info.output = open(args.output, "wb")
        except OSError as exc:
            raise VirtctlError(open_error(args.output, exc)) from None
    else:
        info.messages_to_stderr = True
    try:
        _durations(info, args)
    except VirtctlError:
        info.close()
        raise
    return info


def _durations(info: VMExportInfo, args: argparse.Namespace) -> None:
    if args.ttl:
        ttl = parse_duration(args.ttl)
        # KubeVirt sets spec.ttlDuration only for a positive duration; the server's default applies otherwise.
        info.ttl = format_duration(ttl) if ttl > 0 else ""
    if args.readiness_timeout:
        info.readiness_timeout = parse_duration(args.readiness_timeout) / 1e9
