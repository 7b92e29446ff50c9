"""`virtctl create vm` (pkg/virtctl/create/vm): a VirtualMachine manifest from flags, printed for `kubectl apply -f -`.

Flags are applied in upstream's order, so volumes get its fixed boot order (containerdisk > PVC > imported) unless a
`bootorder` says otherwise; the errors are upstream's texts.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.create_params import (
    ParamKind,
    flag_error,
    map_params,
    random_suffix,
    split_prefixed_name,
    supported,
)
from pykubevirt.virtctl.create_vm_volumes import (
    CONTAINERDISK_FLAG,
    IMPORT_FLAG,
    PVC_FLAG,
    SYSPREP_FLAG,
    SYSPREP_PARAMS,
    VOLUME_PARAMS,
    Volumes,
    import_help,
)

CLOUD_INIT_DISK = "cloudinitdisk"
CLOUD_CONFIG = "#cloud-config"
RUN_STRATEGIES = ("Always", "Manual", "Halted", "Once", "RerunOnFailure")
CLOUD_INIT_TYPES = ("nocloud", "configdrive", "none")
# The flags that ask for a cloud-init data source (cloudInitFlagsChanged).
CLOUD_INIT_FLAGS = frozenset(
    {
        "user",
        "password-file",
        "ssh-key",
        "ga-manage-ssh",
        "cloud-init",
        "cloud-init-user-data",
        "cloud-init-network-data",
    }
)
ACCESS_CRED_PARAMS: dict[str, ParamKind] = {"type": "string", "src": "string", "method": "string", "user": "string"}
# cobra's MarkFlagsMutuallyExclusive groups, checked in the order cobra checks them (sorted by the joined names).
EXCLUSIVE_GROUPS = sorted(
    [
        ("memory", "instancetype", "infer-instancetype", "infer-instancetype-from"),
        ("preference", "infer-preference", "infer-preference-from"),
        ("cloud-init-user-data", "user"),
        ("cloud-init-user-data", "password-file"),
        ("cloud-init-user-data", "ssh-key"),
        ("cloud-init-user-data", "ga-manage-ssh"),
    ],
    key=" ".join,
)
# pflag booleans whose being given matters (explicit inference, cloud-init asked for): parsed here, not by argparse.
TRI_STATE_FLAGS = ("infer-instancetype", "infer-preference", "ga-manage-ssh")


@dataclass
class VMFlags:
    """The flags as given; `changed` names those on the command line (cobra's Changed)."""

    values: dict[str, Any]
    changed: set[str]
    namespace: str | None = None
    warnings: list[str] = field(default_factory=list)

    def get(self, flag: str, default: Any = None) -> Any:
        value = self.values.get(flag)
        return default if value is None else value


def flags_from(args: argparse.Namespace, namespace: str | None) -> VMFlags:
    """The parsed arguments as cobra sees them: values with defaults, and which were given."""
    values: dict[str, Any] = {}
    changed: set[str] = set()
    for action_flag in _ALL_FLAGS:
        value = getattr(args, action_flag.replace("-", "_"), None)
        if value is None or value == []:
            continue
        changed.add(action_flag)
        if action_flag in TRI_STATE_FLAGS:
            value = _parse_bool(action_flag, value)
        elif action_flag == "ssh-key":
            value = [key for item in value for row in csv.reader([item]) for key in row]
        values[action_flag] = value
    return VMFlags(values, changed, namespace)


def _parse_bool(flag: str, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise VirtctlError(
        f'invalid argument "{text}" for "--{flag}" flag: strconv.ParseBool: parsing "{text}": invalid syntax'
    )


def check_exclusive(changed: set[str]) -> None:
    for group in EXCLUSIVE_GROUPS:
        given = sorted(flag for flag in group if flag in changed)
        if len(given) > 1:
            raise VirtctlError(
                f"if any flags in the group [{' '.join(group)}] are set none of the others can be; "
                f"[{' '.join(given)}] were all set"
            )


class VMManifest:
    """Builds the manifest step by step, as upstream's createVM does."""

    def __init__(self, flags: VMFlags) -> None:
        self.flags = flags
        self.changed = set(flags.changed)
        self.cloud_init = str(flags.get("cloud-init", "nocloud"))
        self.ga_manage_ssh = bool(flags.get("ga-manage-ssh", False))
        self.volume_import = list(flags.get("volume-import", []))
        self.name = str(flags.get("name") or f"vm-{random_suffix()}")
        self.inferred_from = {
            "instancetype": str(flags.get("infer-instancetype-from", "")),
            "preference": str(flags.get("infer-preference-from", "")),
        }

    def build(self) -> dict[str, Any]:
        check_exclusive(self.flags.changed)
        vm = self._new()
        self.volumes = Volumes(vm)
        steps: dict[str, Callable[[], None]] = {
            "run-strategy": self._run_strategy,
            "instancetype": lambda: self._matcher(vm, "instancetype"),
            "preference": lambda: self._matcher(vm, "preference"),
            CONTAINERDISK_FLAG: lambda: self.volumes.containerdisks(self.flags.get(CONTAINERDISK_FLAG)),
            PVC_FLAG: lambda: self.volumes.pvcs(self.flags.get(PVC_FLAG)),
            "volume-datasource": lambda: self._alias("volume-datasource", "ds"),
            "volume-clone-pvc": lambda: self._alias("volume-clone-pvc", "pvc"),
            "volume-blank": lambda: self._alias("volume-blank", "blank"),
            IMPORT_FLAG: lambda: self.volumes.imports(self.volume_import),
            SYSPREP_FLAG: lambda: self.volumes.sysprep(self.flags.get(SYSPREP_FLAG)),
            "access-cred": lambda: self._access_credentials(vm),
        }
        for flag, step in steps.items():
            if flag in self.changed:
                step()
        self._cloud_init(vm)
        self._infer(vm)
        return vm

    def _new(self) -> dict[str, Any]:
        memory = str(self.flags.get("memory", "512Mi"))
        try:
            guest = str(Quantity.parse(memory))
        except QuantityError as exc:
            raise flag_error("memory", str(exc)) from None
        metadata: dict[str, Any] = {"name": self.name}
        if self.flags.namespace:
            metadata["namespace"] = self.flags.namespace
        spec = {
            "domain": {"devices": {}, "memory": {"guest": guest}, "resources": {}},
            "terminationGracePeriodSeconds": int(self.flags.get("termination-grace-period", 180)),
        }
        return {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": metadata,
            "spec": {"runStrategy": "Always", "template": {"metadata": {}, "spec": spec}},
            "status": {},
        }

    def _run_strategy(self) -> None:
        given = str(self.flags.get("run-strategy"))
        for strategy in RUN_STRATEGIES:
            if strategy.lower() == given.lower():
                self.volumes.vm["spec"]["runStrategy"] = strategy
                return
        raise flag_error(
            "run-strategy", f'invalid run strategy "{given}", supported values are: {", ".join(RUN_STRATEGIES)}'
        )

    def _matcher(self, vm: dict[str, Any], what: str) -> None:
        """--instancetype / --preference: `[kind/]name`; without a kind, KubeVirt looks for a cluster-wide one."""
        try:
            kind, name = split_prefixed_name(str(self.flags.get(what)))
        except ValueError as exc:
            raise flag_error(what, str(exc)) from None
        kind = kind.lower()
        kinds = (f"virtualmachine{what}", f"virtualmachinecluster{what}")
        if kind and kind not in kinds:
            raise flag_error(what, f'invalid {what} kind "{kind}", supported values are: {", ".join(kinds)}')
        if what == "instancetype":
            vm["spec"]["template"]["spec"]["domain"].pop("memory", None)
        vm["spec"][what] = {"name": name, **({"kind": kind} if kind else {})}

    def _alias(self, flag: str, kind: str) -> None:
        """A deprecated volume flag, as --volume-import with its type (prepended, as upstream does)."""
        self.flags.warnings.append(f"Flag --{flag} has been deprecated, use flag --volume-import instead")
        for value in self.flags.get(flag):
            if value == "":
                raise flag_error(IMPORT_FLAG, "params may not be empty")
            self.volume_import.insert(0, f"type:{kind},{value}")
        self.changed.add(IMPORT_FLAG)

    def _access_credentials(self, vm: dict[str, Any]) -> None:
        for value in self.flags.get("access-cred"):
            params = map_params("access-cred", value, ACCESS_CRED_PARAMS)
            if not params.get("src"):
                raise flag_error("access-cred", "src must be specified")
            try:
                namespace, secret = split_prefixed_name(str(params["src"]))
            except ValueError as exc:
                raise flag_error("access-cred", f"src invalid: {exc}") from None
            if namespace:
                raise flag_error("access-cred", f'not allowed to specify namespace of secret "{secret}"')
            kind = str(params.get("type", "")).lower()
            if kind in ("ssh", ""):
                credential = self._ssh_credential(params, secret)
            elif kind == "password":
                credential = _password_credential(params, secret)
            else:
                raise flag_error(
                    "access-cred",
                    f'invalid access credential type "{params["type"]}", supported values are: ssh, password',
                )
            vm["spec"]["template"]["spec"].setdefault("accessCredentials", []).append(credential)

    def _ssh_credential(self, params: dict[str, Any], secret: str) -> dict[str, Any]:
        method = str(params.get("method", "")).lower()
        if method in ("ga", ""):
            user = str(params.get("user") or self.flags.get("user", ""))
            if not user:
                raise flag_error(
                    "access-cred",
                    'user must be specified with access credential ssh method ga ("--user" flag or param "user")',
                )
            # The guest agent may only write the keys when the guest allows it (cloud-init's runcmd below).
            if "ga-manage-ssh" not in self.changed:
                self.ga_manage_ssh = True
                self.changed.add("ga-manage-ssh")
            propagation: dict[str, Any] = {"qemuGuestAgent": {"users": [user]}}
        elif method in ("nocloud", "configdrive"):
            if params.get("user"):
                raise flag_error("access-cred", USER_INVALID)
            if "cloud-init" not in self.changed:
                self.cloud_init = method
                self.changed.add("cloud-init")
            if self.cloud_init.lower() != method:
                raise flag_error(
                    "access-cred",
                    f"method param and value passed to --cloud-init have to match: {method} vs {self.cloud_init}",
                )
            propagation = {"noCloud": {}} if method == "nocloud" else {"configDrive": {}}
        else:
            raise flag_error(
                "access-cred",
                f'invalid access credentials ssh method "{params["method"]}", supported values are: ga, nocloud, '
                "configdrive",
            )
        return {
            "sshPublicKey": {"propagationMethod": propagation, "source": {"secret": {"secretName": secret}}},
        }

    def _cloud_init(self, vm: dict[str, Any]) -> None:
        if not self.changed & CLOUD_INIT_FLAGS:
            return
        if "password-file" in self.changed:
            self.flags.warnings.append(
                "WARNING: --password-file: The password is stored in cleartext in the VM definition!"
            )
        if self.volumes.exists(CLOUD_INIT_DISK):
            raise VirtctlError(f'there is already a volume with name "{CLOUD_INIT_DISK}"')
        kind = self.cloud_init.lower()
        if kind == "none":
            # --user alone is no reason to warn, as upstream has it.
            if self.changed & (CLOUD_INIT_FLAGS - {"user", "cloud-init"}):
                self.flags.warnings.append(
                    "WARNING: --cloud-init: was set to none, not creating a data source although other cloud-init "
                    "options were set"
                )
            return
        if kind not in CLOUD_INIT_TYPES:
            raise flag_error(
                "cloud-init",
                f'invalid cloud-init data source type "{self.cloud_init}", supported values are: '
                + ", ".join(CLOUD_INIT_TYPES),
            )
        source: dict[str, Any] = {}
        if network := self.flags.get("cloud-init-network-data"):
            source["networkDataBase64"] = network
        if user_data := self.flags.get("cloud-init-user-data"):
            source["userDataBase64"] = user_data
        else:
            source["userData"] = self._cloud_config()
        empty = source.get("userData") == CLOUD_CONFIG and "networkDataBase64" not in source
        if empty and "cloud-init" not in self.changed:
            return
        key = "cloudInitNoCloud" if kind == "nocloud" else "cloudInitConfigDrive"
        vm["spec"]["template"]["spec"].setdefault("volumes", []).append({"name": CLOUD_INIT_DISK, key: source})

    def _cloud_config(self) -> str:
        config = CLOUD_CONFIG
        if user := self.flags.get("user"):
            config += f"\nuser: {user}"
        if path := self.flags.get("password-file"):
            try:
                password = Path(path).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise flag_error(
                    "password-file", f"open {path}: {exc.strerror.lower() if exc.strerror else exc}"
                ) from None
            if password:
                config += f"\npassword: {password}\nchpasswd: {{ expire: False }}"
        if keys := self.flags.get("ssh-key"):
            config += "\nssh_authorized_keys:" + "".join(f"\n  - {key}" for key in keys)
        if self.ga_manage_ssh:
            config += "\nruncmd:\n  - [ setsebool, -P, 'virt_qemu_ga_manage_ssh', 'on' ]"
        return config

    def _infer(self, vm: dict[str, Any]) -> None:
        """Instancetype and preference from the boot volume; errors count only when inference was asked for."""
        for what, skip in (
            ("instancetype", "instancetype" in self.changed or "memory" in self.changed),
            ("preference", "preference" in self.changed),
        ):
            if skip or not self.flags.get(f"infer-{what}", True):
                continue
            explicit = bool(self.changed & {f"infer-{what}", f"infer-{what}-from"})
            try:
                self._infer_one(vm, what, explicit)
            except VirtctlError:
                if explicit:
                    raise

    def _infer_one(self, vm: dict[str, Any], what: str, explicit: bool) -> None:
        spec = vm["spec"]["template"]["spec"]
        name = self.inferred_from[what]
        if not name:
            volumes = spec.get("volumes", [])
            if not volumes:
                raise VirtctlError("at least one volume is needed to infer an instance type or preference")
            orders = self.volumes.boot_orders
            name = orders[min(orders)] if orders else volumes[0]["name"]
            self.inferred_from[what] = name
        volume = next((v for v in spec.get("volumes", []) if v["name"] == name), None)
        if volume is None:
            raise VirtctlError(f'there is no volume with name "{name}"')
        _check_inferable(vm, volume)
        matcher: dict[str, Any] = {"inferFromVolume": name}
        vm["spec"][what] = matcher
        if explicit:
            if what == "instancetype":
                spec["domain"].pop("memory", None)
        else:
            # Implicit inference must not fail the VM on the server: the command was valid without it.
            matcher["inferFromVolumeFailurePolicy"] = "Ignore"


USER_INVALID = "user cannot be specified with selected access credential type and method"


def _password_credential(params: dict[str, Any], secret: str) -> dict[str, Any]:
    method = str(params.get("method", ""))
    if method and method.lower() != "ga":
        raise flag_error(
            "access-cred", f'invalid access credentials password method "{method}", supported values are: ga'
        )
    if params.get("user"):
        raise flag_error("access-cred", USER_INVALID)
    return {
        "userPassword": {
            "propagationMethod": {"qemuGuestAgent": {}},
            "source": {"secret": {"secretName": secret}},
        }
    }


def _check_inferable(vm: dict[str, Any], volume: dict[str, Any]) -> None:
    if "persistentVolumeClaim" in volume:
        return
    if "dataVolume" not in volume:
        raise VirtctlError("inference of instancetype or preference works only with datasources, datavolumes or pvcs")
    for template in vm["spec"].get("dataVolumeTemplates", []):
        if template["metadata"]["name"] != volume["dataVolume"]["name"]:
            continue
        source = template["spec"].get("source", {})
        ref = template["spec"].get("sourceRef", {})
        if not ({"pvc", "registry", "snapshot"} & set(source) or ref.get("kind") == "DataSource"):
            raise VirtctlError(
                "this datavolume is not valid to infer an instancetype or preference from "
                "(source needs to be PVC, Registry or Snapshot, sourceRef needs to be DataSource)"
            )
        return


_STRING_FLAGS = (
    *("name", "run-strategy", "memory", "instancetype", "infer-instancetype-from", "preference"),
    *("infer-preference-from", SYSPREP_FLAG, "user", "password-file", "cloud-init", "cloud-init-user-data"),
    "cloud-init-network-data",
)
_ARRAY_FLAGS = (CONTAINERDISK_FLAG, PVC_FLAG, IMPORT_FLAG, "ssh-key", "access-cred")
_DEPRECATED_FLAGS = ("volume-datasource", "volume-clone-pvc", "volume-blank")
_ALL_FLAGS = (*_STRING_FLAGS, *_ARRAY_FLAGS, *_DEPRECATED_FLAGS, *TRI_STATE_FLAGS, "termination-grace-period")


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    text = {
        "name": "the name of the VM (default: vm-<random>)",
        "run-strategy": "the RunStrategy of the VM (default: Always)",
        "memory": "the guest memory of the VM (default: 512Mi)",
        "instancetype": "the instancetype, [virtualmachineinstancetype/]NAME; excludes inference",
        "infer-instancetype-from": "the volume to infer the instancetype from",
        "preference": "the preference, [virtualmachinepreference/]NAME; excludes inference",
        "infer-preference-from": "the volume to infer the preference from",
        SYSPREP_FLAG: f"a ConfigMap or Secret as sysprep volume: {supported(SYSPREP_PARAMS)}",
        "user": "the user of the generated cloud-init user data",
        "password-file": "a file with the password of the generated cloud-init user data",
        "cloud-init": "the generated cloud-init data source: nocloud, configdrive or none",
        "cloud-init-user-data": "base64-encoded cloud-init user data",
        "cloud-init-network-data": "base64-encoded cloud-init network data",
    }
    for flag in _STRING_FLAGS:
        cmd.add_argument(f"--{flag}", default=None, help=text[flag])
    cmd.add_argument("--termination-grace-period", type=int, default=None, help="seconds (default: 180)")
    arrays = {
        CONTAINERDISK_FLAG: f"a containerdisk (repeatable): {supported(VOLUME_PARAMS)}",
        PVC_FLAG: f"a PVC used directly (repeatable): {supported(VOLUME_PARAMS)}",
        IMPORT_FLAG: "a DataVolume to import (repeatable), by type:\n" + import_help(),
        "ssh-key": "authorized ssh keys of the generated cloud-init user data (comma-separated, repeatable)",
        "access-cred": f"an access credential (repeatable): {supported(ACCESS_CRED_PARAMS)}",
        "volume-datasource": "deprecated: --volume-import type:ds",
        "volume-clone-pvc": "deprecated: --volume-import type:pvc",
        "volume-blank": "deprecated: --volume-import type:blank",
    }
    for flag, help_text in arrays.items():
        cmd.add_argument(f"--{flag}", action="append", default=[], help=help_text)
    for flag in TRI_STATE_FLAGS:
        cmd.add_argument(f"--{flag}", nargs="?", const="true", default=None, help="true or false")
