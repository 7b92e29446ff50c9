"""virt-api's expansion of a VM's instancetype and preference, on plain data (pkg/instancetype/expand)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi.expand import ExpandError, expand_vm, vm_from_body


def vm(**template_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "v", "namespace": "ns"},
        "spec": {
            "instancetype": {"name": "it"},
            "preference": {"name": "pref", "kind": "virtualmachinepreference"},
            "template": {"spec": {"domain": {"devices": {}}, **template_spec}},
        },
        "status": {"instancetypeRef": {"name": "it"}, "preferenceRef": {"name": "pref"}, "ready": False},
    }


INSTANCETYPE = {"cpu": {"guest": 4}, "memory": {"guest": "1Gi"}}


def test_the_preference_applies_to_the_default_disks_and_the_matchers_go() -> None:
    preference = {"devices": {"preferredDiskBus": "virtio"}, "cpu": {"preferredCPUTopology": "threads"}}
    volumes = [{"name": "root", "containerDisk": {"image": "img"}}]
    expanded = expand_vm(vm(volumes=volumes), INSTANCETYPE, preference, ClusterConfig())
    domain = expanded["spec"]["template"]["spec"]["domain"]
    # The volume got its disk before the preference, so the preferred bus is on it.
    assert domain["devices"]["disks"] == [{"name": "root", "disk": {"bus": "virtio"}}]
    assert (domain["cpu"]["threads"], domain["cpu"]["cores"], domain["cpu"]["sockets"]) == (4, 1, 1)
    assert domain["memory"]["guest"] == "1Gi"
    assert "instancetype" not in expanded["spec"] and "preference" not in expanded["spec"]
    assert expanded["status"] == {"ready": False}


def test_a_vm_without_matchers_is_returned_as_it_is() -> None:
    plain = vm()
    del plain["spec"]["instancetype"], plain["spec"]["preference"]
    assert expand_vm(plain, None, None, ClusterConfig()) == plain


def test_conflicts_are_named_together() -> None:
    clashing = vm()
    clashing["spec"]["template"]["spec"]["domain"].update(cpu={"sockets": 2, "cores": 2}, memory={"guest": "2Gi"})
    with pytest.raises(ExpandError) as refused:
        expand_vm(clashing, INSTANCETYPE, None, ClusterConfig())
    assert str(refused.value) == (
        "VM field(s) spec.template.spec.domain.cpu.sockets, spec.template.spec.domain.cpu.cores, "
        "spec.template.spec.domain.memory.guest conflicts with selected instance type"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty request body"),
        (b"{nope", "Can not unmarshal Request body to struct, error: "),
        (
            b'{"metadata": {"namespace": "other"}, "spec": {"template": {"spec": {"domain": {"devices": {}}}}}}',
            "VM namespace must be",
        ),
        (b'{"spec": {"runStrategy": 7}}', "Object is not a valid VirtualMachine"),
    ],
)
def test_a_posted_vm_is_checked_first(body: bytes, message: str) -> None:
    with pytest.raises(errors.APIError) as refused:
        vm_from_body(body, "ns")
    assert refused.value.code == 400 and refused.value.message.startswith(message)


def test_a_posted_vm_gets_the_requests_namespace() -> None:
    body = b'{"spec": {"template": {"spec": {"domain": {"devices": {}}}}}}'
    assert vm_from_body(body, "ns")["metadata"]["namespace"] == "ns"
    with pytest.raises(errors.APIError) as refused:
        vm_from_body(b'{"spec": {"runStrategy": 7}}', "ns")
    causes = refused.value.details["causes"]
    assert {"message": "spec.template: Required value"} in causes, causes
