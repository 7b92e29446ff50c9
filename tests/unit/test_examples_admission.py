"""Every manifest of the specification through mutate + validate, against INDEX.md's expected outcome."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.admission.causes import rejection_message
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vm, mutate_vmi
from pykubevirt.admission.validation import validate_datavolume, validate_vm, validate_vmi_create
from tests import paths
from tests.support.object_lookup import DictLookup

EXAMPLES = paths.EXAMPLES
SCENARIOS = sorted((EXAMPLES / "scenarios").glob("*.yaml"))
_HEADER = re.compile(r"^# scenario: .*; expect: (accept|reject: (?P<message>.*))$")
# Rejected by the strict schema layer (unknown field masquerade.ports), which runs before admission.
SCHEMA_REJECTS = {"087-masq-ports-http-https.yaml", "088-masq-ports-ssh.yaml", "089-masq-ports-app.yaml"}
STANDARD_2_MESSAGE = (
    "VM field(s) spec.template.spec.domain.cpu.cores conflicts with selected instance type, "
    "VM field(s) spec.template.spec.domain.memory.guest conflicts with selected instance type"
)


WITH_STANDARD_2 = AdmissionContext(
    lookup=DictLookup(
        {
            ("VirtualMachineClusterInstancetype", None, "standard-2"): {
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineClusterInstancetype",
                "metadata": {"name": "standard-2"},
                "spec": {"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}},
            },
            ("VirtualMachineClusterPreference", None, "fedora"): {
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineClusterPreference",
                "metadata": {"name": "fedora"},
                "spec": {"devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio"}},
            },
        }
    )
)


def admit(doc: dict[str, Any], ctx: AdmissionContext) -> str:
    """ "accept" or the rejection message for a CREATE of `doc` (mutated copy, then validated)."""
    obj = copy.deepcopy(doc)
    if obj["kind"] == "VirtualMachine":
        mutate_vm(obj, ctx, operation="CREATE")
        causes = validate_vm(obj, ctx)
    elif obj["kind"] == "VirtualMachineInstance":
        mutate_vmi(obj, ctx, operation="CREATE")
        causes = validate_vmi_create(obj, ctx)
    elif obj["kind"] == "DataVolume":
        causes = validate_datavolume(obj, ctx)
    else:
        raise AssertionError(f"no admission for {obj['kind']}")
    return "accept" if not causes else rejection_message(causes)


def expectation(path: Path) -> str:
    match = _HEADER.match(path.read_text(encoding="utf-8").splitlines()[0])
    assert match, f"{path.name}: header does not state an expectation"
    return match.group("message") or "accept"


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]


def test_all_scenarios_are_covered() -> None:
    assert len(SCENARIOS) == 103


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    (doc,) = load(path)
    expected = expectation(path)
    got = admit(doc, AdmissionContext())
    if path.name in SCHEMA_REJECTS:
        assert expected.startswith('unknown field "'), expected
        assert got == "accept"
    else:
        assert got == expected


def test_scenario_001_with_the_instancetype_present() -> None:
    (doc,) = load(EXAMPLES / "scenarios" / "001-instancetype-preference.yaml")
    assert admit(doc, WITH_STANDARD_2) == "accept"


SEED_VERDICTS = [
    ("000-vm-my-vm.yaml", "VirtualMachine", "accept"),
    ("001-vmi-centos01.yaml", "VirtualMachineInstance", "accept"),
    ("001-vm-centos01.yaml", "VirtualMachine", "accept"),
    ("003-vmi-my-vmi.yaml", "VirtualMachineInstance", "accept"),
    ("003-vm-production-vm.yaml", "VirtualMachine", "accept"),
    # The CRD schema rejects it first (spec.template: Required value); admission's own rule 1 says this.
    ("003-vm-stopped-vm.yaml", "VirtualMachine", "missing virtual machine template."),
    # n/a in INDEX.md (a CDI object); CDI's webhook accepts it.
    ("003-dv-fedora-dv.yaml", "DataVolume", "accept"),
]


@pytest.mark.parametrize(("name", "kind", "expected"), SEED_VERDICTS, ids=[s[0] for s in SEED_VERDICTS])
def test_seed(name: str, kind: str, expected: str) -> None:
    docs = [d for d in load(EXAMPLES / "seed" / name) if d.get("kind") == kind]
    assert len(docs) == 1
    assert admit(docs[0], AdmissionContext()) == expected


def test_seed_my_vm_conflicts_with_existing_instancetype() -> None:
    (doc,) = load(EXAMPLES / "seed" / "003-vm-my-vm.yaml")
    assert admit(doc, WITH_STANDARD_2) == STANDARD_2_MESSAGE


def test_seed_my_vm_accepted_without_instancetype() -> None:
    (doc,) = load(EXAMPLES / "seed" / "003-vm-my-vm.yaml")
    assert admit(doc, AdmissionContext()) == "accept"


def test_seed_documents_without_admission() -> None:
    # The launcher Pod and the PVC are core Kubernetes objects; virt-api does not admit them.
    pod = load(EXAMPLES / "seed" / "000-pod-virt-launcher-my-vm.yaml")
    pvc = [d for d in load(EXAMPLES / "seed" / "001-vmi-centos01.yaml") if d.get("kind") == "PersistentVolumeClaim"]
    assert [d["kind"] for d in pod] == ["Pod"]
    assert len(pvc) == 1
