"""virt-api's memorydump and removememorydump decisions on plain data (pkg/virt-api/rest/memorydump.go)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.api.quantity import Quantity
from pykubevirt.virtapi import memory_dump as md

CLAIM_CONFLICT = 'Operation cannot be fulfilled on persistentvolumeclaim.kubevirt.io "dump": '
VM_CONFLICT = 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "v": '


def vmi(memory: str | None = "128Mi", phase: str = "Running") -> dict[str, Any]:
    requests = {"memory": memory} if memory is not None else {}
    return {
        "metadata": {"name": "v"},
        "spec": {"domain": {"resources": {"requests": requests}}},
        "status": {"phase": phase},
    }


def claim(storage: str | None = "1Gi", **spec: Any) -> dict[str, Any]:
    requests = {"storage": storage} if storage is not None else {}
    return {"metadata": {"name": "dump"}, "spec": {"resources": {"requests": requests}, **spec}}


def vm(request: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"printableStatus": "Running"}
    if request is not None:
        status["memoryDumpRequest"] = request
    return {"metadata": {"name": "v"}, "status": status}


def raised(call: Any, *args: Any) -> errors.APIError:
    with pytest.raises(errors.APIError) as caught:
        call(*args)
    return caught.value


# ------------------------------------------------------------------------------------------------------ sizes


@pytest.mark.parametrize(
    ("memory", "dump", "with_overhead"),
    [
        # 200Mi × 1.055 is 211Mi exactly in float64; 228Mi × 1.055 rounds up to the next MiB.
        ("100Mi", "200Mi", "211Mi"),
        ("128Mi", "228Mi", "241Mi"),
        ("1Gi", "1124Mi", "1186Mi"),
        # A DecimalSI request prints its sizes as plain numbers of bytes.
        ("1G", "1104857600", "1166016512"),
        # No memory request: resource.ResourceList.Memory()'s zero, which is BinarySI.
        (None, "100Mi", "106Mi"),
    ],
)
def test_expected_dump_size_and_the_claim_size_it_needs(memory: str | None, dump: str, with_overhead: str) -> None:
    size = md.expected_dump_size(vmi(memory))
    assert str(size) == dump
    assert str(md.size_with_overhead(size)) == with_overhead


def test_overhead_rounds_up_to_at_least_one_mebibyte() -> None:
    assert str(md.size_with_overhead(Quantity.parse("1"))) == "1048576"
    assert str(md.size_with_overhead(Quantity.parse("1Ki"))) == "1Mi"
    assert str(md.size_with_overhead(Quantity.parse("100Mi"), "0")) == "100Mi"


@pytest.mark.parametrize(
    ("storage", "scaled"),
    [("100Mi", "104858k"), ("1Gi", "1073742k"), ("1G", "1G"), ("1500", "2k"), ("0", "0")],
)
def test_claim_size_is_rounded_up_to_thousands(storage: str, scaled: str) -> None:
    assert str(md.kilo_scaled(Quantity.parse(storage))) == scaled


# ------------------------------------------------------------------------------------------------------ the claim


def test_a_large_enough_filesystem_claim_is_accepted() -> None:
    md.check_claim(vmi(), claim("1Gi", volumeMode="Filesystem", accessModes=["ReadWriteOnce"]))
    # 241Mi rounds up to 252707k, above the 241Mi (252706816 bytes) needed.
    md.check_claim(vmi(), claim("241Mi"))


def test_block_and_read_only_claims_are_refused() -> None:
    error = raised(md.check_claim, vmi(), claim(volumeMode="Block"))
    assert (error.code, error.reason) == (409, "Conflict")
    assert error.message == CLAIM_CONFLICT + "pvc should be filesystem pvc"
    assert error.details == {"name": "dump", "kind": "persistentvolumeclaim", "group": "kubevirt.io"}
    error = raised(md.check_claim, vmi(), claim(accessModes=["ReadWriteOnce", "ReadOnlyMany"]))
    assert error.message == CLAIM_CONFLICT + "pvc access mode can't be read only"
    # The volume mode is checked first.
    error = raised(md.check_claim, vmi(), claim(volumeMode="Block", accessModes=["ReadOnlyMany"]))
    assert error.message == CLAIM_CONFLICT + "pvc should be filesystem pvc"


@pytest.mark.parametrize(
    ("memory", "storage", "why"),
    [
        ("128Mi", "100Mi", "pvc size [104858k] should be bigger then [241Mi]"),
        ("128Mi", "240Mi", "pvc size [251659k] should be bigger then [241Mi]"),
        ("1G", "1G", "pvc size [1G] should be bigger then [1166016512]"),
        ("128Mi", None, "pvc size [0] should be bigger then [241Mi]"),
    ],
)
def test_a_claim_too_small_for_the_dump_is_refused(memory: str, storage: str | None, why: str) -> None:
    error = raised(md.check_claim, vmi(memory), claim(storage))
    assert (error.code, error.message) == (409, CLAIM_CONFLICT + why)


def test_claim_not_found_names_it_in_kubevirts_group() -> None:
    error = md.claim_not_found("dump")
    assert (error.code, error.message) == (404, 'persistentvolumeclaim.kubevirt.io "dump" not found')


def test_the_vmi_must_be_running() -> None:
    md.check_running(vmi())
    error = raised(md.check_running, vmi(phase="Scheduled"))
    assert error.code == 409
    assert (
        error.message == 'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "v": VMI is not running'
    )


# ------------------------------------------------------------------------------------------------------ the request


def test_the_body_becomes_an_associating_request() -> None:
    assert md.parse_request(b'{"claimName": "dump"}') == {"claimName": "dump", "phase": "Associating"}
    # Whatever phase the caller sent is overwritten; YAML is accepted as Go's decoder accepts it.
    assert md.parse_request(b"claimName: dump\nphase: Completed\n") == {"claimName": "dump", "phase": "Associating"}
    # The other fields of the struct are kept as Go would serialise them.
    body = b'{"claimName": "d", "remove": true, "fileName": "", "message": "", "endTimestamp": null, '
    body += b'"startTimestamp": "2024-01-02T03:04:05+00:00"}'
    assert md.parse_request(body) == {
        "claimName": "d",
        "phase": "Associating",
        "remove": True,
        "startTimestamp": "2024-01-02T03:04:05Z",
        "fileName": "",
    }
    # `{}` and `null` are an empty request, whose claim the VM's current one may fill in.
    assert md.parse_request(b"{}") == md.parse_request(b"null") == {"claimName": "", "phase": "Associating"}


def test_bodies_that_do_not_decode_are_bad_requests() -> None:
    error = raised(md.parse_request, b"")
    assert (error.code, error.message) == (400, "Request with no body")
    error = raised(md.parse_request, b"[1]")
    assert error.code == 400
    assert error.message == (
        "Can not unmarshal Request body to struct, error: "
        "json: cannot unmarshal array into Go value of type v1.VirtualMachineMemoryDumpRequest"
    )
    error = raised(md.parse_request, b'{"claimName": 3}')
    assert error.message.endswith(
        "json: cannot unmarshal number into Go struct field VirtualMachineMemoryDumpRequest.claimName of type string"
    )
    error = raised(md.parse_request, b'{"claimName": "d", "remove": "yes"}')
    assert error.message.endswith("VirtualMachineMemoryDumpRequest.remove of type bool")
    error = raised(md.parse_request, b"{not json: [")
    assert error.code == 400 and error.message.startswith("Can not unmarshal Request body to struct, error: ")


def test_the_claim_name_is_required_unless_the_vm_has_one() -> None:
    request = {"claimName": "", "phase": "Associating"}
    error = raised(md.with_claim, vm(), request)
    assert (error.code, error.message) == (400, "Memory dump requires claim name to be set")
    current = {"claimName": "old", "phase": "Completed"}
    assert md.with_claim(vm(current), request) == {"claimName": "old", "phase": "Associating"}
    same = {"claimName": "old", "phase": "Associating"}
    assert md.with_claim(vm(current), same) == same
    assert md.with_claim(vm(), same) == same


def test_another_claim_than_the_vms_is_a_conflict() -> None:
    error = raised(md.with_claim, vm({"claimName": "old", "phase": "Completed"}), {"claimName": "new"})
    assert error.code == 409
    assert error.message == VM_CONFLICT + (
        "can't request memory dump for pvc [new] while pvc [old] is still associated as the memory dump pvc"
    )


# ------------------------------------------------------------------------------------------------------ patches


def test_a_first_request_is_added_after_testing_there_was_none() -> None:
    request = {"claimName": "dump", "phase": "Associating"}
    assert md.dump_patch(vm(), request) == [
        {"op": "test", "path": "/status/memoryDumpRequest", "value": None},
        {"op": "add", "path": "/status/memoryDumpRequest", "value": request},
    ]


@pytest.mark.parametrize("phase", ["Completed", "Failed"])
def test_a_finished_request_is_replaced(phase: str) -> None:
    current = {"claimName": "dump", "phase": phase, "fileName": "f.memory.dump"}
    request = {"claimName": "dump", "phase": "Associating"}
    assert md.dump_patch(vm(current), request) == [
        {"op": "test", "path": "/status/memoryDumpRequest", "value": current},
        {"op": "replace", "path": "/status/memoryDumpRequest", "value": request},
    ]


@pytest.mark.parametrize(
    ("phase", "why"),
    [
        ("Dissociating", "can't dump memory for pvc [dump] a remove memory dump request is in progress"),
        ("Associating", "memory dump request for pvc [dump] already in progress"),
        ("InProgress", "memory dump request for pvc [dump] already in progress"),
        ("Unmounting", "memory dump request for pvc [dump] already in progress"),
    ],
)
def test_a_request_while_another_is_worked_on_is_a_conflict(phase: str, why: str) -> None:
    error = raised(md.dump_patch, vm({"claimName": "dump", "phase": phase}), {"claimName": "dump"})
    assert (error.code, error.message) == (409, VM_CONFLICT + why)


def test_a_remove_request_dissociates_the_current_claim() -> None:
    current = {"claimName": "dump", "phase": "Completed", "fileName": "f.memory.dump"}
    assert md.remove_patch(vm(current)) == [
        {"op": "test", "path": "/status/memoryDumpRequest", "value": current},
        {
            "op": "replace",
            "path": "/status/memoryDumpRequest",
            "value": {"claimName": "dump", "phase": "Dissociating", "remove": True},
        },
    ]


def test_removing_nothing_or_twice_is_a_conflict() -> None:
    error = raised(md.remove_patch, vm())
    assert (error.code, error.message) == (
        409,
        VM_CONFLICT + "can't remove memory dump association for vm v, no association found",
    )
    error = raised(md.remove_patch, vm({"claimName": "dump", "phase": "Dissociating", "remove": True}))
    assert (error.code, error.message) == (
        409,
        VM_CONFLICT + "memory dump remove request for pvc [dump] already exists",
    )
