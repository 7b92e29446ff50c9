"""KubeVirt's webhooks refuse a spec of the wrong JSON types (422) or a number its unsigned Go fields cannot hold (400)
before any default is set."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubevirt.admission import chain
from pykubevirt.admission.causes import AdmissionRejected, RequestDenied
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.config.cluster_config import ClusterConfig
from tests.support.object_lookup import DictLookup

CTX = AdmissionContext(config=ClusterConfig(), lookup=DictLookup({}))


def vmi(cpu: dict[str, Any] | None = None, **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default"},
        "spec": {
            "domain": {
                "cpu": cpu or {"cores": 2},
                "devices": devices,
                "resources": {"requests": {"memory": "64Mi"}},
            }
        },
    }


def vm(template_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "v", "namespace": "default"},
        "spec": {"runStrategy": "Halted", "template": {"spec": template_spec}},
    }


def refusal(obj: dict[str, Any], operation: str = chain.CREATE, old: dict[str, Any] | None = None) -> dict[str, Any]:
    with pytest.raises(AdmissionRejected) as refused:
        chain.mutate(obj, CTX, operation=operation, old=old)
    return refused.value.status()


@pytest.mark.parametrize(("cores", "got"), [("2", "string"), (1.5, "number"), (True, "boolean")])
def test_a_value_of_the_wrong_type_is_the_schema_checks_422(cores: Any, got: str) -> None:
    status = refusal(vmi({"cores": cores}))
    assert status["code"] == 422
    assert status["message"] == (
        'admission webhook "virtualmachineinstances-mutator.kubevirt.io" denied the request: '
        f'spec.domain.cpu.cores in body must be of type integer: "{got}"'
    )


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        (vmi({"cores": -1}), "number -1 into Go struct field CPU.spec.domain.cpu.cores of type uint32"),
        (vmi({"threads": 2**32}), "number 4294967296 into Go struct field CPU.spec.domain.cpu.threads of type uint32"),
        (
            vmi(disks=[{"name": "a", "disk": {}}, {"name": "b", "disk": {}, "bootOrder": -2}]),
            "number -2 into Go struct field Disk.spec.domain.devices.disks.bootOrder of type uint",
        ),
    ],
)
def test_a_number_an_unsigned_field_cannot_hold_is_gos_decoding_error(obj: dict[str, Any], text: str) -> None:
    status = refusal(obj)
    assert status["code"] == 400
    assert status["message"] == (
        f'admission webhook "virtualmachineinstances-mutator.kubevirt.io" denied the request: '
        f"json: cannot unmarshal {text}"
    )


def test_a_vms_template_is_decoded_by_the_vm_mutator_on_create_and_update() -> None:
    template = vmi({"sockets": -3})["spec"]
    with pytest.raises(RequestDenied) as refused:
        chain.mutate(vm(template), CTX, operation=chain.UPDATE, old=vm(vmi()["spec"]))
    assert str(refused.value) == (
        "json: cannot unmarshal number -3 into Go struct field CPU.spec.template.spec.domain.cpu.sockets of type uint32"
    )
    assert refused.value.webhook == "virtualmachines-mutator.kubevirt.io"


def test_an_update_leaving_the_spec_as_it_was_is_not_decoded_again() -> None:
    # A status write of an object stored before these checks keeps going.
    stored = vmi({"cores": -1})
    written = copy.deepcopy(stored)
    written["status"] = {"phase": "Running"}
    chain.mutate(written, CTX, operation=chain.UPDATE, old=stored)
    # A spec change is decoded, and refused under the update validator's name (a VMI has no update mutator).
    written["spec"]["domain"]["cpu"]["sockets"] = 2
    assert refusal(written, chain.UPDATE, stored)["message"].startswith(
        'admission webhook "virtualmachineinstances-update-validator.kubevirt.io" denied the request: json: '
    )


def test_whole_unsigned_numbers_pass() -> None:
    mutated = chain.mutate(vmi({"cores": 2, "sockets": 1, "threads": 1}), CTX)
    assert mutated["spec"]["domain"]["cpu"]["cores"] == 2
