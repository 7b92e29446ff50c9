"""CDI's DataVolume mutating webhook on plain data: who may clone from another namespace, and what it answers."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.admission import chain
from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.context import AccessCheck, AdmissionContext
from tests.support.object_lookup import DictLookup

NAMESPACES = {("Namespace", None, ns): {"metadata": {"name": ns}} for ns in ("team", "golden")}


def dv(source: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "disk", "namespace": "team", "annotations": annotations or {}}
    spec = {**source, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": meta, "spec": spec}


def context(granted: set[tuple[str, str, str]], extra: dict[Any, Any] | None = None) -> AdmissionContext:
    """A user allowed exactly the (verb, resource[/subresource], namespace) in `granted`; the checks are recorded."""

    def authorize(check: AccessCheck) -> bool:
        resource = f"{check.resource}/{check.subresource}" if check.subresource else check.resource
        return (check.verb, resource, check.namespace) in granted

    return AdmissionContext(lookup=DictLookup({**NAMESPACES, **(extra or {})}), username="alice", authorize=authorize)


def refusal(obj: dict[str, Any], ctx: AdmissionContext) -> dict[str, Any]:
    with pytest.raises(AdmissionRejected) as rejected:
        chain.mutate(obj, ctx)
    return rejected.value.status()


CLAIM = {"source": {"pvc": {"namespace": "golden", "name": "fedora"}}}
SNAPSHOT = {"source": {"snapshot": {"namespace": "golden", "name": "fedora-snap"}}}


def test_a_clone_from_another_namespace_without_rights_there_is_refused_as_cdi_refuses_it() -> None:
    status = refusal(dv(CLAIM), context(set()))
    assert status["code"] == 422 and "reason" not in status
    assert status["message"] == (
        'admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  '
        "User alice has insufficient permissions in clone source namespace golden"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "User alice has insufficient permissions in clone source namespace golden",
            "field": "spec.source.PVC.namespace",
        }
    ]


@pytest.mark.parametrize(
    "granted",
    [{("create", "datavolumes/source", "golden")}, {("create", "pods", "golden")}],
)
def test_a_claim_may_be_cloned_with_datavolumes_source_or_pods_in_its_namespace(granted: set[Any]) -> None:
    chain.mutate(dv(CLAIM), context(granted))


def test_a_snapshot_needs_datavolumes_source_or_both_pods_and_pvcs() -> None:
    chain.mutate(dv(SNAPSHOT), context({("create", "datavolumes/source", "golden")}))
    chain.mutate(dv(SNAPSHOT), context({("create", "pods", "golden"), ("create", "pvcs", "golden")}))
    assert refusal(dv(SNAPSHOT), context({("create", "pods", "golden")}))["code"] == 422


def test_within_one_namespace_no_right_is_asked_and_imports_are_not_clones() -> None:
    chain.mutate(dv({"source": {"pvc": {"name": "fedora"}}}), context(set()))
    chain.mutate(dv({"source": {"http": {"url": "http://127.0.0.1/x.img"}}}), context(set()))


def test_a_datasource_is_followed_to_what_it_names_and_one_missing_is_refused() -> None:
    source = {"spec": {"source": {"pvc": {"namespace": "golden", "name": "fedora"}}}}
    chained = {"spec": {"source": {"dataSource": {"name": "fedora"}}}, "status": {"source": CLAIM["source"]}}
    lookup = {("DataSource", "golden", "fedora"): source, ("DataSource", "golden", "latest"): chained}
    for name in ("fedora", "latest"):
        ref = {"sourceRef": {"kind": "DataSource", "name": name, "namespace": "golden"}}
        assert refusal(dv(ref), context(set(), lookup))["code"] == 422
        chain.mutate(dv(ref), context({("create", "datavolumes/source", "golden")}, lookup))
    missing = refusal(dv({"sourceRef": {"kind": "DataSource", "name": "nothing"}}), context(set()))
    assert (missing["code"], missing["message"]) == (
        400,
        'admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request: '
        'datasources.cdi.kubevirt.io "nothing" not found',
    )


def test_a_missing_source_namespace_is_refused() -> None:
    status = refusal(dv({"source": {"pvc": {"namespace": "elsewhere", "name": "x"}}}), context(set()))
    assert (status["code"], status["message"].rpartition(": ")[2]) == (400, 'namespaces "elsewhere" not found')


def test_prepopulated_and_static_volumes_go_through_whatever_the_answer() -> None:
    for annotation in ("cdi.kubevirt.io/storage.prePopulated", "cdi.kubevirt.io/storage.checkStaticVolume"):
        chain.mutate(dv(CLAIM, {annotation: "disk"}), context(set()))
        chain.mutate(dv({"sourceRef": {"kind": "DataSource", "name": "nothing"}}, {annotation: ""}), context(set()))


def test_without_an_authorizer_offline_admission_refuses_nothing_for_rights() -> None:
    chain.mutate(dv(CLAIM), AdmissionContext(lookup=DictLookup(dict(NAMESPACES))))


def test_a_datasource_claim_without_a_namespace_is_the_datasources_own() -> None:
    """As the embedded CDI clones it (and KubeVirt resolves it): not the DataVolume's, which would let anyone clone
    another namespace's claim through a DataSource there."""
    lookup = {("DataSource", "golden", "os"): {"spec": {"source": {"pvc": {"name": "fedora"}}}}}
    ref = {"sourceRef": {"kind": "DataSource", "name": "os", "namespace": "golden"}}
    assert refusal(dv(ref), context(set(), lookup))["code"] == 422
    chain.mutate(dv(ref), context({("create", "datavolumes/source", "golden")}, lookup))
    # In the DataVolume's own namespace, nothing more is asked.
    own = {("DataSource", "team", "os"): {"spec": {"source": {"pvc": {"name": "fedora"}}}}}
    chain.mutate(dv({"sourceRef": {"kind": "DataSource", "name": "os"}}), context(set(), own))
