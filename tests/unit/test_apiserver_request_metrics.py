"""kube-apiserver's request metric labels read from a request's method, path, query and content type."""

from __future__ import annotations

from pykubevirt.apiserver.request_metrics import RequestLabels, request_labels, storage_resource


def labels(method: str, path: str, content_type: str = "", **query: str) -> RequestLabels | None:
    return request_labels(method, path, query, content_type)


def test_reads_are_get_list_or_watch_with_their_scope() -> None:
    assert labels("GET", "/api/v1/namespaces/ns/pods/p") == RequestLabels("GET", "", "", "v1", "pods", "", "resource")
    assert labels("GET", "/api/v1/namespaces/ns/pods") == RequestLabels("LIST", "", "", "v1", "pods", "", "namespace")
    assert labels("GET", "/api/v1/pods") == RequestLabels("LIST", "", "", "v1", "pods", "", "cluster")
    watch = labels("GET", "/apis/kubevirt.io/v1/virtualmachines", watch="true")
    assert watch == RequestLabels("WATCH", "", "kubevirt.io", "v1", "virtualmachines", "", "cluster")
    assert watch.long_running
    legacy = labels("GET", "/api/v1/watch/namespaces/ns/pods")
    assert legacy is not None and (legacy.verb, legacy.scope) == ("WATCH", "namespace")


def test_writes_are_reported_by_kube_apiservers_verbs() -> None:
    status = labels("PUT", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/x/status")
    assert status == RequestLabels("PUT", "", "kubevirt.io", "v1", "virtualmachineinstances", "status", "resource")
    applied = labels("PATCH", "/api/v1/namespaces/ns/configmaps/c", "application/apply-patch+yaml", dryRun="All")
    assert applied is not None and (applied.verb, applied.dry_run) == ("APPLY", "All")
    assert labels("DELETE", "/api/v1/namespaces/ns/pods") == RequestLabels(
        "DELETECOLLECTION", "", "", "v1", "pods", "", "namespace"
    )
    assert labels("POST", "/api/v1/namespaces/ns/pods") == RequestLabels("POST", "", "", "v1", "pods", "", "namespace")


def test_connections_and_non_resource_paths() -> None:
    console = labels("GET", "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v/console")
    assert console is not None and console.verb == "CONNECT" and console.long_running
    assert labels("GET", "/healthz") == RequestLabels("GET")
    assert labels("GET", "/apis/kubevirt.io/v1") is None
    assert labels("GET", "/some/thing") is None


def test_storage_resources_are_named_as_kube_names_them() -> None:
    assert storage_resource("core/pods") == "pods"
    assert storage_resource("kubevirt.io/virtualmachines") == "virtualmachines.kubevirt.io"
