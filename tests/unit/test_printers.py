"""Server-side Tables: HumanDuration, CRD printer columns, the built-in kinds' printers and the Table object."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.apiserver import printers, storage_printers
from pykubevirt.apiserver.printers import build_table, crd_columns_table, go_text, human_duration

NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(printers, "clock", lambda: NOW)


DURATIONS = [
    (timedelta(seconds=-3), "<invalid>"),
    (timedelta(seconds=-2), "<invalid>"),
    (timedelta(seconds=-1.5), "0s"),
    (timedelta(seconds=-1), "0s"),
    (timedelta(milliseconds=-1), "0s"),
    (timedelta(0), "0s"),
    (timedelta(seconds=0.9), "0s"),
    (timedelta(seconds=45), "45s"),
    (timedelta(seconds=119), "119s"),
    (timedelta(seconds=120), "2m"),
    (timedelta(seconds=121), "2m1s"),
    (timedelta(minutes=3, seconds=2), "3m2s"),
    (timedelta(minutes=9, seconds=59), "9m59s"),
    (timedelta(minutes=10), "10m"),
    (timedelta(minutes=10, seconds=59), "10m"),
    (timedelta(minutes=179, seconds=59), "179m"),
    (timedelta(hours=3), "3h"),
    (timedelta(hours=3, minutes=40), "3h40m"),
    (timedelta(hours=7, minutes=59, seconds=59), "7h59m"),
    (timedelta(hours=8), "8h"),
    (timedelta(hours=47, minutes=59), "47h"),
    (timedelta(hours=48), "2d"),
    (timedelta(days=2, hours=3), "2d3h"),
    (timedelta(days=7, hours=23, minutes=59), "7d23h"),
    (timedelta(days=8), "8d"),
    (timedelta(days=8, hours=5), "8d"),
    (timedelta(days=729, hours=23), "729d"),
    (timedelta(days=730), "2y"),
    (timedelta(days=830), "2y100d"),
    (timedelta(days=365 * 8 - 1), "7y364d"),
    (timedelta(days=365 * 8), "8y"),
    (timedelta(days=365 * 20 + 100), "20y"),
]


@pytest.mark.parametrize(("delta", "text"), DURATIONS)
def test_human_duration(delta: timedelta, text: str) -> None:
    assert human_duration(delta) == text


# ---------------------------------------------------------------------------------------------- custom resources

VM_COLUMNS = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Status", "type": "string", "jsonPath": ".status.printableStatus", "description": "Human Readable Status"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
]
VMI_COLUMNS = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "IP", "type": "string", "jsonPath": ".status.interfaces[0].ipAddress"},
    {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeName"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    {
        "name": "Live-Migratable",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.conditions[?(@.type=='LiveMigratable')].status",
    },
]


def test_crd_columns_for_virtual_machines() -> None:
    vms = [
        {
            "metadata": {"name": "testvm", "creationTimestamp": ago(minutes=5)},
            "status": {"printableStatus": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
        {
            "metadata": {"name": "stopped", "creationTimestamp": ago(days=3, hours=2)},
            "status": {"printableStatus": "Stopped"},
        },
        {"metadata": {"name": "fresh"}},
    ]
    columns, rows = crd_columns_table(VM_COLUMNS, vms, NOW)
    assert [c["name"] for c in columns] == ["Name", "Age", "Status", "Ready"]
    assert columns[0]["type"] == "string" and columns[0]["format"] == "name"
    assert columns[0]["description"].startswith("Name must be unique within a namespace.")
    assert columns[1] == {
        "name": "Age",
        "type": "date",
        "format": "",
        "priority": 0,
        "description": "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
    }
    assert columns[2]["description"] == "Human Readable Status"
    assert rows == [
        ["testvm", "5m", "Running", "True"],
        ["stopped", "3d2h", "Stopped", None],
        ["fresh", None, None, None],
    ]


def test_crd_columns_for_virtual_machine_instances() -> None:
    vmi = {
        "metadata": {"name": "testvmi", "creationTimestamp": ago(seconds=42)},
        "status": {
            "phase": "Running",
            "nodeName": "node01",
            "interfaces": [{"ipAddress": "10.244.0.12"}, {"ipAddress": "10.0.0.9"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "LiveMigratable", "status": "False"}],
        },
    }
    columns, rows = crd_columns_table(VMI_COLUMNS, [vmi], NOW)
    assert [(c["name"], c["priority"]) for c in columns][-1] == ("Live-Migratable", 1)
    assert rows == [["testvmi", "42s", "Running", "10.244.0.12", "node01", "True", "False"]]


def test_crd_without_columns_prints_age() -> None:
    columns, rows = crd_columns_table([], [{"metadata": {"name": "x", "creationTimestamp": ago(hours=4)}}], NOW)
    assert [(c["name"], c["type"]) for c in columns] == [("Name", "string"), ("Age", "date")]
    assert rows == [["x", "4h"]]


TYPED = [
    ("integer", 3, 3),
    ("integer", 3.9, 3),
    ("integer", "3", None),
    ("integer", True, None),
    ("number", 3, 3.0),
    ("number", 2.5, 2.5),
    ("number", "2.5", None),
    ("boolean", True, True),
    ("boolean", "true", None),
    ("string", "Running", "Running"),
    ("string", 7, "7"),
    ("string", 1.5, "1.5"),
    ("string", 1e6, "1e+06"),
    ("string", False, "false"),
    ("string", {"b": 1, "a": "<x>"}, '{"a":"\\u003cx\\u003e","b":1}'),
    ("string", ["a", "b"], '["a","b"]'),
    ("string", None, None),
    ("date", ago(seconds=30), "30s"),
    ("date", "2024-06-01T11:59:30.123456Z", "29s"),
    ("date", "2024-06-01T13:59:00+02:00", "60s"),
    ("date", "yesterday", "<invalid>"),
    ("date", "2024-06-01 11:00:00Z", "<invalid>"),
    ("date", "2024-13-01T00:00:00Z", "<invalid>"),
    ("date", "", "<unknown>"),
    ("date", 12, None),
    ("date", ago(seconds=-30), "<invalid>"),
    ("unknown-type", "x", None),
]


@pytest.mark.parametrize(("column_type", "value", "cell"), TYPED)
def test_crd_cell_types(column_type: str, value: Any, cell: Any) -> None:
    spec = [{"name": "C", "type": column_type, "jsonPath": ".v"}]
    _, rows = crd_columns_table(spec, [{"metadata": {"name": "n"}, "v": value}], NOW)
    assert rows[0][1] == cell
    assert type(rows[0][1]) is type(cell)


def test_crd_column_invalid_path_prints_nothing() -> None:
    _, rows = crd_columns_table([{"name": "C", "type": "string", "jsonPath": ".a["}], [{"a": [1]}], NOW)
    assert rows == [["", None]]


def test_go_text() -> None:
    assert [go_text(v) for v in (None, 0.0001, 1e-05, 123456.0, 1234567.0, -2.5, 10)] == [
        "<no value>",
        "0.0001",
        "1e-05",
        "123456",
        "1.234567e+06",
        "-2.5",
        "10",
    ]


# ------------------------------------------------------------------------------------------------------ the Table

OBJECTS = [{"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "y"}}, "spec": {"k": 1}}]


def test_build_table_with_partial_metadata() -> None:
    table = build_table([printers.NAME], [["a"]], OBJECTS, list_meta={"resourceVersion": "9", "continue": "tok"})
    assert table == {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "9", "continue": "tok"},
        "columnDefinitions": [printers.NAME],
        "rows": [
            {
                "cells": ["a"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": OBJECTS[0]["metadata"],
                },
            }
        ],
    }


def test_build_table_include_object() -> None:
    assert build_table([], [["a"]], OBJECTS, include_object="Object")["rows"][0]["object"] is OBJECTS[0]
    assert build_table([], [["a"]], OBJECTS, include_object="None")["rows"] == [{"cells": ["a"]}]
    assert build_table(None, [], [], list_meta={"resourceVersion": "1", "continue": ""})["metadata"] == {
        "resourceVersion": "1"
    }


# --------------------------------------------------------------------------------------------------------- pods


def container(name: str = "compute", *, ready: bool = False, restarts: int = 0, **state: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "ready": ready, "restartCount": restarts, "state": state}
    return status


def pod(
    phase: str = "Running",
    statuses: list[dict[str, Any]] | None = None,
    *,
    containers: int = 1,
    init: list[dict[str, Any]] | None = None,
    init_specs: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    deleting: bool = False,
    reason: str = "",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "virt-launcher-vm-x", "creationTimestamp": ago(minutes=7)},
        "spec": {"containers": [{"name": f"c{i}"} for i in range(containers)], "initContainers": init_specs or []},
        "status": {
            "phase": phase,
            "containerStatuses": statuses or [],
            "initContainerStatuses": init or [],
            "conditions": conditions or [],
        },
    }
    if deleting:
        obj["metadata"]["deletionTimestamp"] = ago(seconds=1)
    if reason:
        obj["status"]["reason"] = reason
    return obj


RUNNING = {"running": {"startedAt": ago(minutes=6)}}
INIT_SPECS = [{"name": "i0"}, {"name": "i1"}]
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}

POD_STATUS = [
    (pod("Pending"), "0/1", "Pending"),
    (pod("Pending", [container(waiting={"reason": "ContainerCreating"})]), "0/1", "ContainerCreating"),
    (pod("Pending", [container(waiting={"reason": "ErrImagePull", "message": "x"})]), "0/1", "ErrImagePull"),
    (pod("Running", [container(waiting={"reason": "CrashLoopBackOff"})]), "0/1", "CrashLoopBackOff"),
    (pod("Running", [container(ready=True, **RUNNING)]), "1/1", "Running"),
    (pod("Running", [container(ready=False, **RUNNING)]), "0/1", "Running"),
    (pod("Running", [container(ready=True, **RUNNING)], deleting=True), "1/1", "Terminating"),
    (pod("Succeeded", [container(**DONE)]), "0/1", "Completed"),
    (pod("Succeeded", [container(**DONE)], deleting=True), "0/1", "Completed"),
    (pod("Failed", [container(terminated={"exitCode": 1, "reason": "Error"})]), "0/1", "Error"),
    (pod("Failed", [container(terminated={"exitCode": 2})]), "0/1", "ExitCode:2"),
    (pod("Failed", [container(terminated={"exitCode": 137, "signal": 9})]), "0/1", "Signal:9"),
    (pod("Failed", reason="Evicted"), "0/1", "Evicted"),
    (pod("Running", [container(ready=True, **RUNNING)], deleting=True, reason="NodeLost"), "1/1", "Unknown"),
    (
        pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
        "0/1",
        "SchedulingGated",
    ),
    # the first container's reason wins over later ones
    (
        pod(
            "Pending",
            [
                container("a", waiting={"reason": "ErrImagePull"}),
                container("b", waiting={"reason": "ContainerCreating"}),
            ],
            containers=2,
        ),
        "0/2",
        "ErrImagePull",
    ),
    # a finished container next to a running one
    (
        pod(
            "Running",
            [container("a", **DONE), container("b", ready=True, **RUNNING)],
            containers=2,
            conditions=[{"type": "Ready", "status": "True"}],
        ),
        "1/2",
        "Running",
    ),
    (pod("Running", [container("a", **DONE), container("b", ready=True, **RUNNING)], containers=2), "1/2", "NotReady"),
    # init containers
    (pod("Pending", init_specs=INIT_SPECS), "0/1", "Pending"),
    (
        pod("Pending", init=[container("i0", waiting={"reason": "PodInitializing"})], init_specs=INIT_SPECS),
        "0/1",
        "Init:0/2",
    ),
    (
        pod("Pending", init=[container("i0", **DONE), container("i1", **RUNNING)], init_specs=INIT_SPECS),
        "0/1",
        "Init:1/2",
    ),
    (
        pod("Pending", init=[container("i0", waiting={"reason": "ImagePullBackOff"})], init_specs=INIT_SPECS),
        "0/1",
        "Init:ImagePullBackOff",
    ),
    (
        pod("Failed", init=[container("i0", terminated={"exitCode": 1, "reason": "Error"})], init_specs=INIT_SPECS),
        "0/1",
        "Init:Error",
    ),
    (
        pod("Pending", init=[container("i0", terminated={"exitCode": 3})], init_specs=INIT_SPECS),
        "0/1",
        "Init:ExitCode:3",
    ),
    (
        pod("Pending", init=[container("i0", terminated={"exitCode": 1, "signal": 15})], init_specs=INIT_SPECS),
        "0/1",
        "Init:Signal:15",
    ),
    (
        pod(
            "Pending", init=[container("i0", **DONE), container("i1", **RUNNING)], init_specs=INIT_SPECS, deleting=True
        ),
        "0/1",
        "Terminating",
    ),
    # a sidecar (restartable init container) counts towards READY
    (
        pod(
            "Running",
            [container("c0", ready=True, **RUNNING)],
            init=[container("sidecar", ready=True, **RUNNING) | {"started": True}],
            init_specs=[{"name": "sidecar", "restartPolicy": "Always"}],
            conditions=[{"type": "Initialized", "status": "True"}],
        ),
        "2/2",
        "Running",
    ),
]


@pytest.mark.parametrize(("obj", "ready", "status"), POD_STATUS)
def test_pod_ready_and_status(obj: dict[str, Any], ready: str, status: str) -> None:
    _, rows = printers.pod_table([obj])
    assert rows[0][1:3] == [ready, status]


def test_pod_restarts_and_wide_columns() -> None:
    restarted = container("a", ready=True, restarts=3, **RUNNING)
    restarted["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": ago(minutes=5)}}
    other = container("b", ready=True, restarts=1, **RUNNING)
    other["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": ago(minutes=50)}}
    obj = pod("Running", [restarted, other], containers=2)
    obj["spec"]["nodeName"] = "node01"
    obj["spec"]["readinessGates"] = [{"conditionType": "kubevirt.io/ready"}, {"conditionType": "other"}]
    obj["status"]["podIPs"] = [{"ip": "10.244.0.7"}, {"ip": "fd00::7"}]
    obj["status"]["conditions"] = [{"type": "kubevirt.io/ready", "status": "True"}]
    columns, rows = printers.pod_table([obj])
    assert [(c["name"], c["priority"]) for c in columns] == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]
    assert rows == [
        ["virt-launcher-vm-x", "2/2", "Running", "4 (5m ago)", "7m", "10.244.0.7", "node01", "<none>", "1/2"]
    ]
    _, rows = printers.pod_table([pod("Running", [container(restarts=2, **RUNNING)])])
    assert rows[0][3:] == ["2", "7m", "<none>", "<none>", "<none>", "<none>"]


# -------------------------------------------------------------------------------------------------------- nodes


def node(
    conditions: list[dict[str, Any]], *, unschedulable: bool = False, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "node01", "creationTimestamp": ago(days=3), "labels": labels or {}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"conditions": conditions, "nodeInfo": {"kubeletVersion": "v1.32.4"}},
    }


NODE_STATUS = [
    (node([{"type": "Ready", "status": "True"}]), "Ready"),
    (node([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}]), "NotReady"),
    (node([{"type": "Ready", "status": "Unknown"}]), "NotReady"),
    (node([]), "Unknown"),
    (node([{"type": "Ready", "status": "True"}], unschedulable=True), "Ready,SchedulingDisabled"),
    (node([], unschedulable=True), "Unknown,SchedulingDisabled"),
]


@pytest.mark.parametrize(("obj", "status"), NODE_STATUS)
def test_node_status(obj: dict[str, Any], status: str) -> None:
    assert printers.node_table([obj])[1][0][1] == status


NODE_ROLES = [
    ({}, "<none>"),
    ({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}, "control-plane,worker"),
    ({"kubernetes.io/role": "master"}, "master"),
    ({"kubernetes.io/role": ""}, "<none>"),
    ({"node-role.kubernetes.io/": "x"}, "<none>"),
]


@pytest.mark.parametrize(("labels", "roles"), NODE_ROLES)
def test_node_roles(labels: dict[str, str], roles: str) -> None:
    assert printers.node_table([node([], labels=labels)])[1][0][2] == roles


def test_node_row_and_wide_columns() -> None:
    obj = node([{"type": "Ready", "status": "True"}])
    obj["status"]["addresses"] = [
        {"type": "Hostname", "address": "node01"},
        {"type": "InternalIP", "address": "192.168.0.10"},
    ]
    obj["status"]["nodeInfo"] |= {"osImage": "Fedora", "kernelVersion": "6.8", "containerRuntimeVersion": "pykubevirt"}
    columns, rows = printers.node_table([obj])
    assert [c["name"] for c in columns if c["priority"]] == [
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]
    assert rows == [
        ["node01", "Ready", "<none>", "3d", "v1.32.4", "192.168.0.10", "<none>", "Fedora", "6.8", "pykubevirt"]
    ]
    assert printers.node_table([node([])])[1][0][7:] == ["<unknown>", "<unknown>", "<unknown>"]


# ------------------------------------------------------------------------------------------------------- events


def test_event_rows() -> None:
    event = {
        "metadata": {"name": "testvm.17d", "creationTimestamp": ago(minutes=9)},
        "involvedObject": {"kind": "VirtualMachine", "name": "testvm", "fieldPath": "spec.template"},
        "reason": "SuccessfulCreate",
        "type": "Normal",
        "message": "Started the virtual machine \n",
        "source": {"component": "virtualmachine-controller", "host": "node01"},
        "firstTimestamp": ago(minutes=9),
        "lastTimestamp": ago(minutes=2),
        "count": 4,
    }
    columns, rows = printers.event_table([event])
    assert [(c["name"], c["priority"]) for c in columns] == [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ]
    assert rows == [
        [
            "2m",
            "Normal",
            "SuccessfulCreate",
            "virtualmachine/testvm",
            "spec.template",
            "virtualmachine-controller, node01",
            "Started the virtual machine",
            "9m",
            4,
            "testvm.17d",
        ]
    ]


def test_event_rows_new_style() -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Node"},
        "type": "Warning",
        "reason": "R",
        "eventTime": "2024-06-01T11:59:00.000000Z",
        "reportingController": "virt-handler",
        "reportingInstance": "node01",
    }
    assert printers.event_table([event])[1] == [
        ["60s", "Warning", "R", "node", "", "virt-handler, node01", "", "60s", 1, "e"]
    ]
    event["series"] = {"count": 7, "lastObservedTime": "2024-06-01T11:59:50.000000Z"}
    assert printers.event_table([event])[1][0][0] == "10s"
    assert printers.event_table([event])[1][0][8] == 7
    assert printers.event_table([{"metadata": {"name": "bare"}}])[1][0][0] == "<unknown>"


# -------------------------------------------------------------------------------------------- the other kinds

META = {"name": "obj", "creationTimestamp": ago(hours=5)}

SIMPLE_ROWS = [
    (printers.namespace_table, {"metadata": META, "status": {"phase": "Active"}}, ["obj", "Active", "5h"]),
    (
        printers.namespace_table,
        {"metadata": META | {"deletionTimestamp": ago(seconds=1)}},
        ["obj", "Terminating", "5h"],
    ),
    (
        printers.configmap_table,
        {"metadata": META, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}},
        ["obj", 3, "5h"],
    ),
    (printers.configmap_table, {"metadata": META}, ["obj", 0, "5h"]),
    (
        printers.secret_table,
        {"metadata": META, "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}},
        ["obj", "kubernetes.io/tls", 2, "5h"],
    ),
    (printers.secret_table, {"metadata": META}, ["obj", "Opaque", 0, "5h"]),
    (printers.serviceaccount_table, {"metadata": META, "secrets": [{"name": "t"}]}, ["obj", 1, "5h"]),
    (
        printers.lease_table,
        {"metadata": META, "spec": {"holderIdentity": "virt-controller-1"}},
        ["obj", "virt-controller-1", "5h"],
    ),
    (printers.lease_table, {"metadata": META, "spec": {}}, ["obj", "", "5h"]),
    (
        printers.controllerrevision_table,
        {
            "metadata": META
            | {
                "ownerReferences": [
                    {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "testvm", "controller": False},
                    {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "owner", "controller": True},
                ]
            },
            "revision": 2,
        },
        ["obj", "virtualmachine.kubevirt.io/owner", 2, "5h"],
    ),
    (
        printers.controllerrevision_table,
        {
            "metadata": META
            | {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": True}]},
            "revision": 1,
        },
        ["obj", "pod/p", 1, "5h"],
    ),
    (printers.controllerrevision_table, {"metadata": META, "revision": 1}, ["obj", "<none>", 1, "5h"]),
    (
        storage_printers.storageclass_table,
        {
            "metadata": META | {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True,
        },
        ["obj (default)", "kubernetes.io/no-provisioner", "Delete", "WaitForFirstConsumer", True, "5h"],
    ),
    (
        storage_printers.storageclass_table,
        {"metadata": META, "provisioner": "p", "reclaimPolicy": "Retain"},
        ["obj", "p", "Retain", "Immediate", False, "5h"],
    ),
    (
        printers.crd_table,
        {"metadata": {"name": "virtualmachines.kubevirt.io", "creationTimestamp": "2024-05-01T10:00:00+02:00"}},
        ["virtualmachines.kubevirt.io", "2024-05-01T08:00:00Z"],
    ),
    (printers.crd_table, {"metadata": {"name": "x"}}, ["x", "0001-01-01T00:00:00Z"]),
    (
        storage_printers.pvc_table,
        {
            "metadata": META,
            "spec": {"volumeName": "pv-1", "storageClassName": "local", "volumeMode": "Filesystem"},
            "status": {
                "phase": "Bound",
                "capacity": {"storage": "1024Mi"},
                "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
            },
        },
        ["obj", "Bound", "pv-1", "1Gi", "RWO,RWX", "local", "<unset>", "5h", "Filesystem"],
    ),
    (
        storage_printers.pvc_table,
        {
            "metadata": META | {"annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
            "spec": {"storageClassName": "local", "volumeAttributesClassName": "gold"},
            "status": {"phase": "Pending", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]},
        },
        ["obj", "Pending", "", "", "", "beta", "gold", "5h", "<unset>"],
    ),
    (
        storage_printers.pvc_table,
        {"metadata": META | {"deletionTimestamp": ago(seconds=3)}, "spec": {}, "status": {}},
        ["obj", "Terminating", "", "", "", "", "<unset>", "5h", "<unset>"],
    ),
    (
        storage_printers.pv_table,
        {
            "metadata": META,
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOncePod", "ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "local",
                "claimRef": {"namespace": "default", "name": "disk"},
                "volumeMode": "Block",
            },
            "status": {"phase": "Bound"},
        },
        ["obj", "10Gi", "ROX,RWOP", "Retain", "Bound", "default/disk", "local", "<unset>", "", "5h", "Block"],
    ),
    (
        storage_printers.pv_table,
        {"metadata": META, "spec": {}, "status": {"phase": "Failed", "reason": "Broken"}},
        ["obj", "0", "", "", "Failed", "", "", "<unset>", "Broken", "5h", "<unset>"],
    ),
]


@pytest.mark.parametrize(("table", "obj", "cells"), SIMPLE_ROWS)
def test_kind_rows(table: Any, obj: dict[str, Any], cells: list[Any]) -> None:
    columns, rows = table([obj])
    assert rows == [cells]
    assert len(columns) == len(cells)


COLUMN_NAMES = [
    (printers.namespace_table, ["Name", "Status", "Age"], []),
    (printers.configmap_table, ["Name", "Data", "Age"], []),
    (printers.secret_table, ["Name", "Type", "Data", "Age"], []),
    (printers.serviceaccount_table, ["Name", "Secrets", "Age"], []),
    (printers.lease_table, ["Name", "Holder", "Age"], []),
    (printers.controllerrevision_table, ["Name", "Controller", "Revision", "Age"], []),
    (
        storage_printers.storageclass_table,
        ["Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"],
        [],
    ),
    (printers.crd_table, ["Name", "Created At"], []),
    (
        storage_printers.pvc_table,
        [
            "Name",
            "Status",
            "Volume",
            "Capacity",
            "Access Modes",
            "StorageClass",
            "VolumeAttributesClass",
            "Age",
            "VolumeMode",
        ],
        ["VolumeMode"],
    ),
    (
        storage_printers.pv_table,
        [
            "Name",
            "Capacity",
            "Access Modes",
            "Reclaim Policy",
            "Status",
            "Claim",
            "StorageClass",
            "VolumeAttributesClass",
            "Reason",
            "Age",
            "VolumeMode",
        ],
        ["VolumeMode"],
    ),
]


@pytest.mark.parametrize(("table", "names", "wide"), COLUMN_NAMES)
def test_kind_columns(table: Any, names: list[str], wide: list[str]) -> None:
    columns, rows = table([])
    assert rows == []
    assert [c["name"] for c in columns] == names
    assert [c["name"] for c in columns if c["priority"] == 1] == wide
    assert all(set(c) == {"name", "type", "format", "description", "priority"} for c in columns)
    assert columns[0]["format"] == "name"


def test_ages_follow_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    obj = {"metadata": {"name": "n", "creationTimestamp": ago(minutes=1)}}
    assert printers.configmap_table([obj])[1] == [["n", 0, "60s"]]
    monkeypatch.setattr(printers, "clock", lambda: NOW + timedelta(hours=1))
    assert printers.configmap_table([obj])[1] == [["n", 0, "61m"]]
    assert printers.configmap_table([obj], now=NOW)[1] == [["n", 0, "60s"]]
    assert printers.configmap_table([{"metadata": {"name": "n"}}])[1] == [["n", 0, "<unknown>"]]
