"""`virtctl adm log-verbosity` (pkg/virtctl/adm/logverbosity): show, set or reset the components' log verbosity in
the KubeVirt object's `developerConfiguration.logVerbosity`, which the components follow as it changes."""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.resources import KUBEVIRTS
from pykubevirt.log import DEFAULT_VERBOSITY
from pykubevirt.virtctl.client import VirtctlError

# The flag without a value means "show" (KubeVirt's NoOptDefVal 10, which is also accepted as a value for show).
SHOW = 10
MAX_VERBOSITY = 9
ALL = "all"
COMPONENTS = {
    "virt-api": "virtAPI",
    "virt-controller": "virtController",
    "virt-handler": "virtHandler",
    "virt-launcher": "virtLauncher",
    "virt-operator": "virtOperator",
}
DEVELOPER_PATH = "/spec/configuration/developerConfiguration"
VERBOSITY_PATH = DEVELOPER_PATH + "/logVerbosity"
NO_FLAG = "no flag specified - expecting at least one flag"


def _uint(flag: str) -> Any:
    def parse(text: str) -> int:
        if not text.isdigit():
            raise argparse.ArgumentTypeError(
                f'invalid argument "{text}" for "--{flag}" flag: strconv.ParseUint: parsing "{text}": invalid syntax'
            )
        return int(text)

    return parse


def add_commands(sub: Any, parser_class: type[argparse.ArgumentParser], add_globals: Any) -> argparse.ArgumentParser:
    adm = sub.add_parser("adm", help="Administrate KubeVirt configuration.")
    add_globals(adm)
    actions = adm.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class)
    actions.required = True
    cmd = actions.add_parser(
        "log-verbosity",
        help="Show, Set or Reset log verbosity. The verbosity value must be 0-9. The default cluster config is "
        "normally 2.",
    )
    add_globals(cmd)
    for flag in [*COMPONENTS, ALL]:
        what = "all component" if flag == ALL else flag
        cmd.add_argument(
            f"--{flag}", nargs="?", const=SHOW, type=_uint(flag), help=f"show/set {what} log verbosity (0-9)"
        )
    cmd.add_argument("--reset", action="store_true", help="reset log verbosity to the default verbosity (2)")
    # What `adm log-verbosity` without a flag prints before its error, as cobra's cmd.Help().
    cmd.set_defaults(usage_text=cmd.format_help())
    parser: argparse.ArgumentParser = cmd
    return parser


def requested(args: argparse.Namespace) -> dict[str, int]:
    """The component flags given (`all` included) and their values."""
    return {flag: value for flag in [*COMPONENTS, ALL] if (value := getattr(args, flag.replace("-", "_"))) is not None}


def operation(args: argparse.Namespace) -> str:
    """findOperation: "show", "set" (set and/or reset) or "" (nothing asked)."""
    if args.reset and getattr(args, ALL) is not None:
        raise VirtctlError(
            "if any flags in the group [reset all] are set none of the others can be; [all reset] were all set"
        )
    flags = requested(args)
    for flag, value in flags.items():
        if value != SHOW and value > MAX_VERBOSITY:
            raise VirtctlError(f"{flag}: log verbosity must be 0-{MAX_VERBOSITY}")
    show = any(value == SHOW for value in flags.values())
    change = args.reset or any(value != SHOW for value in flags.values())
    if show and change:
        raise VirtctlError("only show or set is allowed")
    return "show" if show else "set" if change else ""


def current_levels(kubevirt: Object) -> tuple[dict[str, int], bool]:
    """The logVerbosity the object has, and whether it has a developerConfiguration at all."""
    developer = ((kubevirt.get("spec") or {}).get("configuration") or {}).get("developerConfiguration")
    if not isinstance(developer, dict):
        return {}, False
    return dict(developer.get("logVerbosity") or {}), True


def show_lines(args: argparse.Namespace, current: dict[str, int]) -> list[str]:
    """`component=level` for each component asked about (all with --all), unset ones at the default, sorted."""
    flags = requested(args)
    shown = COMPONENTS if ALL in flags else {c: f for c, f in COMPONENTS.items() if c in flags}
    return sorted(f"{component}={current.get(field, DEFAULT_VERBOSITY)}" for component, field in shown.items())


def set_patch(args: argparse.Namespace, kubevirt: Object) -> list[dict[str, Any]]:
    """createPatch: empty the levels on --reset (when there are some), then add the levels asked for."""
    current, has_developer = current_levels(kubevirt)
    operations: list[dict[str, Any]] = []
    if not isinstance((kubevirt.get("spec") or {}).get("configuration"), dict):
        operations.append({"op": "add", "path": "/spec/configuration", "value": {}})
    if args.reset and current:
        if not has_developer:
            operations.append({"op": "add", "path": DEVELOPER_PATH, "value": {}})
            has_developer = True
        current = {}
        operations.append({"op": "add", "path": VERBOSITY_PATH, "value": {}})
    flags = requested(args)
    if ALL in flags:
        current.update({field: flags[ALL] for field in COMPONENTS.values()})
    current.update({COMPONENTS[flag]: value for flag, value in flags.items() if flag != ALL})
    if current:
        if not has_developer:
            operations.append({"op": "add", "path": DEVELOPER_PATH, "value": {}})
        operations.append({"op": "add", "path": VERBOSITY_PATH, "value": current})
    return operations if any(op["path"] != "/spec/configuration" for op in operations) else []


async def _installation(client: KubeClient) -> Object:
    found = (await client.list(KUBEVIRTS))["items"]
    if not found:
        raise VirtctlError("could not detect a KubeVirt installation")
    if len(found) > 1:
        raise VirtctlError("invalid kubevirt installation, more than one KubeVirt resource found")
    meta = found[0]["metadata"]
    kubevirt: Object = await client.get(KUBEVIRTS, meta["name"], meta.get("namespace"))
    return kubevirt


async def run(client: KubeClient, args: argparse.Namespace) -> None:
    kubevirt = await _installation(client)
    action = operation(args)
    if action == "":
        print(args.usage_text)
        raise VirtctlError(NO_FLAG)
    if action == "show":
        current, _ = current_levels(kubevirt)
        for line in show_lines(args, current):
            print(line)
        return
    operations = set_patch(args, kubevirt)
    if not operations:
        return
    meta = kubevirt["metadata"]
    await client.patch(KUBEVIRTS, meta["name"], operations, meta.get("namespace"), patch_type=JSON_PATCH)
    print("successfully set/reset the log verbosity")
