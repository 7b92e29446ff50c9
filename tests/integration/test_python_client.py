"""The official `kubernetes` Python client against the embedded server, configured from its kubeconfig."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import NOT_ROOT_CA, configmap, pod_manifest, unique, vm_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.waiting import eventually_sync

GROUP, VERSION, PLURAL = "kubevirt.io", "v1", "virtualmachines"


def api_client(server: APIServerProcess) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


@pytest.fixture(scope="module")
def k8s(apiserver: APIServerProcess) -> Iterator[client.ApiClient]:
    with api_client(apiserver) as api:
        yield api


@pytest.fixture
def ns(k8s: client.ApiClient) -> str:
    name = unique("py")
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": name}})
    # Once kube's controllers have filled it, so that watches see the test's own objects only.
    root_ca = "metadata.name=kube-root-ca.crt"
    eventually_sync(lambda: core.list_namespaced_config_map(name, field_selector=root_ca).items)
    return name


def later(delay: float, action: Callable[[], Any]) -> threading.Thread:
    """Run `action` after `delay` seconds on another thread: a change that should arrive while a watch is open.

    Only for watches from a resourceVersion, which replay a change made before they opened; a watch that starts
    with the current objects uses `acting_after` instead.
    """

    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def acting_after(stream: Iterator[dict[str, Any]], count: int, action: Callable[[], Any]) -> Iterator[dict[str, Any]]:
    """The events of `stream`; `action` runs once the first `count` arrived, so the watch is surely open by then."""
    for seen, event in enumerate(stream, 1):
        yield event
        if seen == count:
            action()


def events_of(stream: Iterator[dict[str, Any]], count: int) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the next `count` events of a stream."""
    found = []
    for event in stream:
        meta = event["raw_object"]["metadata"]
        found.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
        if len(found) == count:
            break
    return found


# --------------------------------------------------------------------------------------------------------- CRUD


def test_custom_objects_crud(k8s: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(k8s)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, vm_manifest("vm1"))
    assert created["metadata"]["uid"]
    assert created["spec"]["runStrategy"] == "Halted"
    got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "vm1")
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, vm_manifest("vm2", app="x"))
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["vm1", "vm2"]
    selected = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, label_selector="app=x")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["vm2"]

    patched = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        "vm1",
        {"metadata": {"labels": {"patched": "yes"}}, "spec": {"runStrategy": "Manual"}},
    )
    assert patched["metadata"]["labels"] == {"patched": "yes"}
    assert patched["spec"]["runStrategy"] == "Manual"
    assert patched["metadata"]["generation"] == 2

    stale = dict(got, spec=dict(got["spec"], runStrategy="Always"))
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "vm1", stale)
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "Conflict"
    fresh = dict(patched, spec=dict(patched["spec"], runStrategy="Always"))
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "vm1", fresh)
    assert replaced["spec"]["runStrategy"] == "Always"

    status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "vm1", {"status": {"printableStatus": "Stopped"}}
    )
    assert status["status"]["printableStatus"] == "Stopped"

    deleted = custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "vm1")
    assert deleted["metadata"]["name"] == "vm1"
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "vm1")
    assert missing.value.status == 404
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert (ns, "vm2") in {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]}


def test_invalid_vm_is_an_api_exception_with_causes(k8s: client.ApiClient, ns: str) -> None:
    vm = vm_manifest("bad")
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["name"] = "missing"
    with pytest.raises(ApiException) as rejected:
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, vm)
    assert rejected.value.status == 422
    body = json.loads(rejected.value.body)
    assert body["reason"] == "Invalid"
    causes = body["details"]["causes"]
    assert causes and all(c.get("reason") and c.get("field") for c in causes), causes


def test_core_objects(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    made = core.create_namespaced_config_map(ns, configmap("cfg"))
    assert made.data == {"k": "v"}
    assert made.metadata.resource_version
    made.data = {"k": "w"}
    replaced = core.replace_namespaced_config_map("cfg", ns, made)
    assert replaced.data == {"k": "w"}
    assert int(replaced.metadata.resource_version) > int(made.metadata.resource_version)
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("cfg", ns, made)
    assert conflict.value.status == 409
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns, field_selector=NOT_ROOT_CA).items] == ["cfg"]

    pod = core.create_namespaced_pod(ns, pod_manifest("launcher", app="virt-launcher"))
    assert pod.spec.containers[0].name == "compute"
    pod.status = client.V1PodStatus(phase="Running", pod_ip="10.0.0.7")
    with_status = core.replace_namespaced_pod_status("launcher", ns, pod)
    assert with_status.status.phase == "Running"
    assert with_status.status.pod_ip == "10.0.0.7"
    # The main resource ignores status; the status subresource ignores spec.
    patched = core.patch_namespaced_pod(
        "launcher", ns, {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert patched.status.phase == "Running"
    assert patched.metadata.labels == {"app": "virt-launcher", "a": "b"}
    core.patch_namespaced_pod_status("launcher", ns, {"status": {"phase": "Succeeded"}, "spec": {"nodeName": "x"}})
    read = core.read_namespaced_pod_status("launcher", ns)
    assert read.status.phase == "Succeeded"
    assert read.spec.node_name is None
    running = core.list_namespaced_pod(ns, field_selector="status.phase=Succeeded")
    assert [p.metadata.name for p in running.items] == ["launcher"]

    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="launcher.1"),
        involved_object=client.V1ObjectReference(kind="Pod", name="launcher", namespace=ns, uid=pod.metadata.uid),
        reason="Started",
        message="Started container compute",
        type="Normal",
        count=1,
    )
    core.create_namespaced_event(ns, event)
    found = core.list_namespaced_event(ns, field_selector="involvedObject.name=launcher,involvedObject.kind=Pod")
    assert [(e.reason, e.message) for e in found.items] == [("Started", "Started container compute")]
    core.delete_namespaced_pod("launcher", ns)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("launcher", ns)
    assert gone.value.status == 404


# --------------------------------------------------------------------------------------------------------- watch


def test_watch_custom_objects_and_resume_after_the_stream_ends(k8s: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(k8s)
    start = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["metadata"]["resourceVersion"]

    def create_and_change() -> None:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, vm_manifest("w1"))
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "w1", {"metadata": {"labels": {"n": "1"}}})

    w = watch.Watch()
    writer = later(0.3, create_and_change)
    first = events_of(
        w.stream(
            custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, resource_version=start, timeout_seconds=3
        ),
        2,
    )
    writer.join()
    w.stop()
    assert [(t, n) for t, n, _ in first] == [("ADDED", "w1"), ("MODIFIED", "w1")]
    resume_from = w.resource_version
    assert resume_from == first[-1][2]

    # Changes while nobody watches, then a watch from the last resourceVersion seen.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "w1", {"metadata": {"labels": {"n": "2"}}})
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, vm_manifest("w2"))
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "w1")
    began = time.monotonic()
    second = [
        (e["type"], e["raw_object"]["metadata"]["name"], e["raw_object"]["metadata"]["resourceVersion"])
        for e in watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            PLURAL,
            resource_version=resume_from,
            timeout_seconds=1,
        )
    ]
    # The server ended the stream at timeoutSeconds.
    assert 0.9 <= time.monotonic() - began < 5
    assert [(t, n) for t, n, _ in second] == [("MODIFIED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")]
    revisions = [int(rv) for _, _, rv in first + second]
    assert revisions == sorted(set(revisions)), revisions


def test_watch_without_resource_version_starts_with_the_current_objects(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespaced_config_map(ns, configmap("a"))
    core.create_namespaced_config_map(ns, configmap("b"))
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, field_selector=NOT_ROOT_CA, timeout_seconds=3)
    got = events_of(acting_after(stream, 2, lambda: core.delete_namespaced_config_map("a", ns)), 3)
    assert [(t, n) for t, n, _ in got] == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


def test_label_selector_watch_sees_objects_enter_and_leave(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    start = core.list_namespaced_config_map(ns).metadata.resource_version

    def changes() -> None:
        core.create_namespaced_config_map(ns, configmap("m", app="other"))
        core.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"app": "chosen"}}})
        core.patch_namespaced_config_map("m", ns, {"data": {"k": "changed"}})
        core.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"app": "gone"}}})
        core.delete_namespaced_config_map("m", ns)
        core.create_namespaced_config_map(ns, configmap("last", app="chosen"))

    writer = later(0.3, changes)
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, ns, label_selector="app=chosen", resource_version=start, timeout_seconds=3
    )
    got = []
    for event in stream:
        got.append((event["type"], event["object"].metadata.name, (event["object"].metadata.labels or {}).get("app")))
        if len(got) == 4:
            break
    writer.join()
    assert got == [
        ("ADDED", "m", "chosen"),
        ("MODIFIED", "m", "chosen"),
        ("DELETED", "m", "chosen"),
        ("ADDED", "last", "chosen"),
    ]


def test_bookmarks_when_allowed(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespaced_config_map(ns, configmap("x"))
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    w = watch.Watch()
    got = list(
        w.stream(
            core.list_namespaced_config_map, ns, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1
        )
    )
    assert [e["type"] for e in got] == ["BOOKMARK"]
    bookmark = got[0]["raw_object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["apiVersion"] == "v1"
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(rv)
    assert w.resource_version == bookmark["metadata"]["resourceVersion"]
    without = list(watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=1))
    assert without == []


def test_send_initial_events_ends_with_a_bookmark(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    for name in ("i1", "i2"):
        core.create_namespaced_config_map(ns, configmap(name))
    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        ns,
        field_selector=NOT_ROOT_CA,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    )
    # i3 comes after the two initial objects and the bookmark that ends them.
    events = acting_after(stream, 3, lambda: core.create_namespaced_config_map(ns, configmap("i3")))
    got = [e for e in events if e["type"] != "BOOKMARK" or e["raw_object"]["metadata"].get("annotations")]
    assert [(e["type"], e["raw_object"]["metadata"].get("name")) for e in got] == [
        ("ADDED", "i1"),
        ("ADDED", "i2"),
        ("BOOKMARK", None),
        ("ADDED", "i3"),
    ]
    assert got[2]["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(got[2]["raw_object"]["metadata"]["resourceVersion"]) >= int(
        got[1]["raw_object"]["metadata"]["resourceVersion"]
    )
    with pytest.raises(ApiException) as rejected:
        core.list_namespaced_config_map(ns, watch=True, send_initial_events=True, timeout_seconds=1)
    assert rejected.value.status == 422


# --------------------------------------------------------------------------------------------------------- 410


def compaction_revision(core: client.CoreV1Api) -> int:
    """The store's compaction revision, as the 410 of a watch from revision 1 states it (0 before any compaction)."""
    response = core.list_namespaced_config_map(
        "default", watch=True, resource_version="1", timeout_seconds=1, _preload_content=False
    )
    try:
        first = json.loads(response.readline())
    finally:
        response.close()
    if first["type"] != "ERROR":
        return 0
    return int(first["object"]["message"].rsplit("(", 1)[1].rstrip(")"))  # "too old resource version: 1 (N)"


def test_watch_from_a_compacted_revision_is_410_then_relist(tmp_path: Path) -> None:
    server = APIServerProcess(tmp_path / "data", "--history-revisions", "5", "--compact-interval", "0.2").start()
    try:
        with api_client(server) as k8s:
            core = client.CoreV1Api(k8s)
            old = core.list_namespaced_config_map("default").metadata.resource_version
            for i in range(3):
                core.create_namespaced_config_map("default", configmap(f"first{i}"))
            first_page = core.list_namespaced_config_map("default", limit=2)
            assert first_page.metadata._continue
            for i in range(20):
                core.create_namespaced_config_map("default", configmap(f"c{i}"))
            # Wait for a compaction after these writes: only the newest 5 revisions remain as history.
            newest = int(core.list_namespaced_config_map("default").metadata.resource_version)
            eventually_sync(lambda: compaction_revision(core) >= newest - 5, timeout=10)
            for i in range(3):
                core.delete_namespaced_config_map(f"first{i}", "default")

            # A continue token from before the compaction cannot give a consistent list any more.
            with pytest.raises(ApiException) as stale_continue:
                core.list_namespaced_config_map("default", limit=2, _continue=first_page.metadata._continue)
            assert stale_continue.value.status == 410
            assert json.loads(stale_continue.value.body)["reason"] == "Expired"

            response = core.list_namespaced_config_map(
                "default", watch=True, resource_version=old, timeout_seconds=5, _preload_content=False
            )
            lines = [json.loads(line) for line in response.read().decode().splitlines() if line.strip()]
            assert len(lines) == 1
            assert lines[0]["type"] == "ERROR"
            status = lines[0]["object"]
            assert (status["kind"], status["code"], status["reason"], status["status"]) == (
                "Status",
                410,
                "Expired",
                "Failure",
            )
            match = json.loads(json.dumps(status["message"]))
            assert match.startswith(f"too old resource version: {old} (")
            compacted = int(match.rsplit("(", 1)[1].rstrip(")"))
            assert int(old) < compacted

            with pytest.raises(ApiException) as expired:
                list(
                    watch.Watch().stream(
                        core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2
                    )
                )
            assert expired.value.status == 410
            assert "too old resource version" in str(expired.value.reason)

            # Relist, then watch from the list's resourceVersion.
            listing = core.list_namespaced_config_map("default", field_selector=NOT_ROOT_CA)
            assert len(listing.items) == 20
            later(0.3, lambda: core.delete_namespaced_config_map("c0", "default"))
            got = events_of(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=3,
                ),
                1,
            )
            assert [(t, n) for t, n, _ in got] == [("DELETED", "c0")]
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------------------- discovery


def test_discovery_apis_of_the_official_client(k8s: client.ApiClient, ns: str) -> None:
    """VersionApi, ApisApi and CoreApi call /version/, /apis/ and /api/ with a trailing slash."""
    version = client.VersionApi(k8s).get_code()
    assert version.major == "1" and version.git_version.startswith("v1.")
    groups = client.ApisApi(k8s).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"kubevirt.io", "apiextensions.k8s.io"} <= names
    core = client.CoreApi(k8s).get_api_versions()
    assert core.versions == ["v1"]
    # The resource calls of the same client keep working beside them.
    assert client.CoreV1Api(k8s).list_namespaced_config_map(ns, field_selector=NOT_ROOT_CA).items == []
    listed = client.CustomObjectsApi(k8s).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    assert listed["items"] == []
