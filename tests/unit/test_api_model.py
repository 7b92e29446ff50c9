"""The API model: every example manifest fits it, every node is structural, and KubeVirt's names and types hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.api import constants
from pykubevirt.api.cdi import DATA_VOLUME
from pykubevirt.api.instancetype import (
    VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE,
    VIRTUAL_MACHINE_CLUSTER_PREFERENCE,
    VIRTUAL_MACHINE_INSTANCETYPE,
    VIRTUAL_MACHINE_PREFERENCE,
)
from pykubevirt.api.kubevirt.migration import VIRTUAL_MACHINE_INSTANCE_MIGRATION
from pykubevirt.api.kubevirt.vm import VIRTUAL_MACHINE
from pykubevirt.api.kubevirt.vmi import VIRTUAL_MACHINE_INSTANCE
from pykubevirt.api.schema import Schema
from tests import paths

EXAMPLES = paths.EXAMPLES
MASQUERADE_PORTS = "spec.template.spec.domain.devices.interfaces[0].masquerade.ports"
MASQUERADE_PORTS_SCENARIOS = ("087-", "088-", "089-")

SCHEMAS: dict[str, Schema] = {
    constants.VM_KIND: VIRTUAL_MACHINE,
    constants.VMI_KIND: VIRTUAL_MACHINE_INSTANCE,
    constants.VMIM_KIND: VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    constants.INSTANCETYPE_KIND: VIRTUAL_MACHINE_INSTANCETYPE,
    constants.CLUSTER_INSTANCETYPE_KIND: VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE,
    constants.PREFERENCE_KIND: VIRTUAL_MACHINE_PREFERENCE,
    constants.CLUSTER_PREFERENCE_KIND: VIRTUAL_MACHINE_CLUSTER_PREFERENCE,
    constants.DATA_VOLUME_KIND: DATA_VOLUME,
}


def unknown_fields(schema: Schema, value: Any, path: str = "") -> list[str]:
    """Dotted paths of the fields in `value` that `schema` does not declare."""
    found: list[str] = []
    if isinstance(value, dict):
        if path == "metadata":
            return found  # ObjectMeta is validated by the API server itself, not by the kind's schema.
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in properties:
                found += unknown_fields(properties[key], item, where)
            elif isinstance(additional, dict):
                found += unknown_fields(additional, item, where)
            elif not preserve:
                found.append(where)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += unknown_fields(schema["items"], item, f"{path}[{index}]")
    return found


def example_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for file in sorted(EXAMPLES.glob("*/*.yaml")):
        with file.open(encoding="utf-8") as stream:
            for index, document in enumerate(yaml.safe_load_all(stream)):
                if isinstance(document, dict):
                    yield f"{file.parent.name}/{file.name}#{index}", document


OUR_DOCUMENTS = [(name, doc) for name, doc in example_documents() if doc.get("kind") in SCHEMAS]


def schema_nodes(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{key}" if path else key)
    if "items" in schema:
        yield from schema_nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}{{}}")


def node_at(schema: Schema, dotted: str) -> Schema:
    """The node at a path written like schema_nodes writes them: `spec.volumes[].name`."""
    node = schema
    for part in dotted.split("."):
        name = part.removesuffix("[]")
        node = node["properties"][name]
        if part.endswith("[]"):
            node = node["items"]
    return node


# Examples.


def test_examples_of_our_kinds_are_found() -> None:
    kinds = [doc["kind"] for _, doc in OUR_DOCUMENTS]
    assert kinds.count(constants.VM_KIND) >= 100
    assert constants.VMI_KIND in kinds and constants.DATA_VOLUME_KIND in kinds


@pytest.mark.parametrize(("name", "document"), OUR_DOCUMENTS, ids=[name for name, _ in OUR_DOCUMENTS])
def test_example_has_no_unknown_fields(name: str, document: dict[str, Any]) -> None:
    expected = [MASQUERADE_PORTS] if Path(name).name.startswith(MASQUERADE_PORTS_SCENARIOS) else []
    assert unknown_fields(SCHEMAS[document["kind"]], document) == expected


def test_unknown_field_walker() -> None:
    vm = {
        "metadata": {"name": "x", "whatever": 1},
        "spec": {
            "template": {
                "metadata": {"labels": {"a": "b"}, "free": True},
                "spec": {
                    "domain": {
                        "clock": {"utc": {}, "kept": 1},
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {"disks": [{"name": "a"}, {"name": "b", "bogus": 1}]},
                    }
                },
            },
            "extra": 1,
        },
    }
    assert unknown_fields(VIRTUAL_MACHINE, vm) == ["spec.template.spec.domain.devices.disks[1].bogus", "spec.extra"]


# Structure.


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_schema_is_structural(kind: str) -> None:
    problems = []
    for path, node in schema_nodes(SCHEMAS[kind]):
        if "$ref" in node or "uniqueItems" in node:
            problems.append(f"{path}: $ref or uniqueItems")
        if not (
            "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        ):
            problems.append(f"{path}: no type")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties together")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{path}: array without items")
    assert problems == []


def test_enums_only_where_kubevirt_has_them() -> None:
    enums = {
        f"{kind}:{path}": node["enum"]
        for kind in sorted(SCHEMAS)
        for path, node in schema_nodes(SCHEMAS[kind])
        if "enum" in node
    }
    assert enums == {
        "VirtualMachine:spec.dataVolumeTemplates[].spec.contentType": ["kubevirt", "archive"],
        "VirtualMachine:spec.template.spec.domain.memory.reservedOverhead.memLock": ["NotRequired", "Required"],
        "VirtualMachine:spec.template.spec.domain.rebootPolicy": ["Reboot", "Terminate"],
        "VirtualMachineInstance:spec.domain.memory.reservedOverhead.memLock": ["NotRequired", "Required"],
        "VirtualMachineInstance:spec.domain.rebootPolicy": ["Reboot", "Terminate"],
        "VirtualMachineInstance:status.migrationState.migrationConfiguration.experimental.compression": [
            "none",
            "zstd",
        ],
        "VirtualMachineInstanceMigration:status.migrationState.migrationConfiguration.experimental.compression": [
            "none",
            "zstd",
        ],
        "DataVolume:spec.contentType": ["kubevirt", "archive"],
    }


def test_preserved_unknown_fields_only_where_kubevirt_keeps_them() -> None:
    preserved = [
        path for path, node in schema_nodes(VIRTUAL_MACHINE) if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserved == [
        "spec.dataVolumeTemplates[].metadata",
        "spec.template.metadata",
        "spec.template.spec.domain.clock",
    ]


def test_important_fields_are_described() -> None:
    vm_spec = "spec.template.spec"
    domain = f"{vm_spec}.domain"
    paths = [
        *(f"spec.{name}" for name in VIRTUAL_MACHINE["properties"]["spec"]["properties"]),
        *(f"status.{name}" for name in VIRTUAL_MACHINE["properties"]["status"]["properties"]),
        *(f"{vm_spec}.{name}" for name in VIRTUAL_MACHINE_INSTANCE["properties"]["spec"]["properties"]),
        *(f"{domain}.{name}" for name in ("devices", "resources", "cpu", "memory", "firmware", "machine")),
        *(f"{domain}.devices.{name}" for name in ("disks", "interfaces")),
    ]
    missing = [path for path in paths if not node_at(VIRTUAL_MACHINE, path).get("description")]
    for schema in (VIRTUAL_MACHINE_INSTANCE, VIRTUAL_MACHINE_INSTANCE_MIGRATION):
        for part in ("spec", "status"):
            missing += [
                f"{schema['description']}: {part}.{name}"
                for name, node in schema["properties"][part]["properties"].items()
                if not node.get("description")
            ]
    assert missing == []


# KubeVirt's names and types.


def test_run_strategy_is_a_described_string_without_enum() -> None:
    node = node_at(VIRTUAL_MACHINE, "spec.runStrategy")
    assert node["type"] == "string" and "enum" not in node
    assert all(strategy in node["description"] for strategy in constants.RUN_STRATEGIES)
    assert node_at(VIRTUAL_MACHINE, "spec.running")["type"] == "boolean"


def test_vm_spec_shape() -> None:
    spec = VIRTUAL_MACHINE["properties"]["spec"]
    assert spec["required"] == ["template"]
    assert VIRTUAL_MACHINE["required"] == ["spec"]
    template = spec["properties"]["template"]
    assert template["properties"]["metadata"]["x-kubernetes-preserve-unknown-fields"] is True
    assert template["properties"]["spec"] == VIRTUAL_MACHINE_INSTANCE["properties"]["spec"]
    assert node_at(VIRTUAL_MACHINE, "spec.dataVolumeTemplates[]")["required"] == ["spec"]
    assert node_at(VIRTUAL_MACHINE, "spec.dataVolumeTemplates[].spec") == DATA_VOLUME["properties"]["spec"]


def test_vmi_field_types() -> None:
    spec = "spec.template.spec"
    grace = node_at(VIRTUAL_MACHINE, f"{spec}.terminationGracePeriodSeconds")
    assert (grace["type"], grace["format"]) == ("integer", "int64")
    guest = node_at(VIRTUAL_MACHINE, f"{spec}.domain.memory.guest")
    assert guest["x-kubernetes-int-or-string"] is True and "pattern" in guest
    cores = node_at(VIRTUAL_MACHINE, f"{spec}.domain.cpu.cores")
    assert (cores["type"], cores["format"]) == ("integer", "int32")
    boot_order = node_at(VIRTUAL_MACHINE, f"{spec}.domain.devices.disks[].bootOrder")
    assert boot_order == {"type": "integer", "description": boot_order["description"]}
    assert node_at(VIRTUAL_MACHINE, f"{spec}.domain")["required"] == ["devices"]
    assert node_at(VIRTUAL_MACHINE, f"{spec}")["required"] == ["domain"]
    assert node_at(VIRTUAL_MACHINE, f"{spec}.domain.devices.disks")["maxItems"] == 256
    limits = node_at(VIRTUAL_MACHINE, f"{spec}.domain.resources.limits")
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True
    masquerade = node_at(VIRTUAL_MACHINE, f"{spec}.domain.devices.interfaces[].masquerade")
    assert masquerade["type"] == "object" and "properties" not in masquerade
    assert "x-kubernetes-preserve-unknown-fields" not in masquerade
    ports = node_at(VIRTUAL_MACHINE, f"{spec}.domain.devices.interfaces[].ports[]")
    assert ports["required"] == ["port"] and ports["properties"]["port"]["format"] == "int32"
    tolerations = node_at(VIRTUAL_MACHINE, f"{spec}.tolerations[].tolerationSeconds")
    assert tolerations["format"] == "int64"
    spread = node_at(VIRTUAL_MACHINE, f"{spec}.topologySpreadConstraints")
    assert spread["x-kubernetes-list-map-keys"] == ["topologyKey", "whenUnsatisfiable"]


def test_vmi_status_fields() -> None:
    status = VIRTUAL_MACHINE_INSTANCE["properties"]["status"]["properties"]
    for name in (
        "phase",
        "conditions",
        "interfaces",
        "migrationState",
        "phaseTransitionTimestamps",
        "guestOSInfo",
        "nodeName",
        "qosClass",
        "activePods",
        "volumeStatus",
        "launcherContainerImageVersion",
        "runtimeUser",
        "currentCPUTopology",
        "memory",
    ):
        assert name in status, name
    assert status["activePods"]["additionalProperties"]["type"] == "string"
    assert status["runtimeUser"]["format"] == "int64"
    assert status["conditions"]["items"]["required"] == ["type", "status"]
    assert status["phaseTransitionTimestamps"]["items"]["properties"]["phaseTransitionTimestamp"]["format"] == (
        "date-time"
    )
    assert status["migrationState"] == node_at(VIRTUAL_MACHINE_INSTANCE_MIGRATION, "status.migrationState")


def test_vm_status_fields() -> None:
    status = VIRTUAL_MACHINE["properties"]["status"]["properties"]
    for name in (
        "created",
        "ready",
        "printableStatus",
        "conditions",
        "stateChangeRequests",
        "volumeRequests",
        "startFailure",
        "memoryDumpRequest",
        "observedGeneration",
        "desiredGeneration",
        "runStrategy",
        "volumeUpdateState",
        "instancetypeRef",
        "preferenceRef",
        "snapshotInProgress",
        "restoreInProgress",
    ):
        assert name in status, name
    assert status["printableStatus"]["default"] == "Stopped"
    request = status["stateChangeRequests"]["items"]
    assert set(request["properties"]) == {"action", "data", "uid"} and request["required"] == ["action"]
    start_failure = status["startFailure"]["properties"]
    assert set(start_failure) == {"consecutiveFailCount", "lastFailedVMIUID", "retryAfterTimestamp"}
    assert start_failure["retryAfterTimestamp"]["format"] == "date-time"
    assert status["observedGeneration"]["format"] == "int64"


def test_instancetype_and_preference_shapes() -> None:
    spec = VIRTUAL_MACHINE_INSTANCETYPE["properties"]["spec"]
    assert spec["required"] == ["cpu", "memory"]
    assert spec["properties"]["cpu"]["required"] == ["guest"]
    assert spec["properties"]["memory"]["properties"]["guest"]["x-kubernetes-int-or-string"] is True
    assert VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE["properties"]["spec"] == spec
    preference = VIRTUAL_MACHINE_PREFERENCE["properties"]["spec"]
    assert "required" not in preference
    assert node_at(VIRTUAL_MACHINE_PREFERENCE, "spec.preferredTerminationGracePeriodSeconds")["format"] == "int64"
    assert VIRTUAL_MACHINE_CLUSTER_PREFERENCE["properties"]["spec"] == preference


def test_data_volume_shape() -> None:
    status = DATA_VOLUME["properties"]["status"]["properties"]
    assert set(status) == {"phase", "progress", "restartCount", "conditions", "claimName"}
    assert "enum" not in status["phase"]
    condition = status["conditions"]["items"]["properties"]
    assert set(condition) == {"type", "status", "lastTransitionTime", "lastHeartbeatTime", "reason", "message"}
    pvc = node_at(DATA_VOLUME, "spec.pvc")
    storage = node_at(DATA_VOLUME, "spec.storage")
    assert pvc["properties"]["accessModes"]["x-kubernetes-list-type"] == "atomic"
    assert "x-kubernetes-list-type" not in storage["properties"]["accessModes"]
    assert set(pvc["properties"]) - set(storage["properties"]) == {"volumeAttributesClassName"}
