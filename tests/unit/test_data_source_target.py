"""What a DataSource stands for as a DataVolume source, as CDI's webhook and controller and KubeVirt all read it."""

from __future__ import annotations

from pykubevirt.api.data_source_target import data_source_target


def test_its_own_claim_or_snapshot_with_the_datasources_namespace_by_default() -> None:
    own = {"metadata": {"namespace": "golden"}, "spec": {"source": {"pvc": {"name": "fedora"}}}}
    assert data_source_target(own) == {"pvc": {"name": "fedora", "namespace": "golden"}}
    elsewhere = {"metadata": {"namespace": "golden"}, "spec": {"source": {"snapshot": {"name": "s", "namespace": "x"}}}}
    assert data_source_target(elsewhere) == {"snapshot": {"name": "s", "namespace": "x"}}
    # Where it was found, when the object itself does not say.
    assert data_source_target({"spec": own["spec"]}, "found-in") == {"pvc": {"name": "fedora", "namespace": "found-in"}}


def test_one_naming_another_datasource_stands_for_what_its_status_resolved_and_none_names_nothing() -> None:
    chained = {
        "metadata": {"namespace": "golden"},
        "spec": {"source": {"dataSource": {"name": "fedora"}}},
        "status": {"source": {"pvc": {"name": "fedora-disk"}}},
    }
    assert data_source_target(chained) == {"pvc": {"name": "fedora-disk", "namespace": "golden"}}
    assert (
        data_source_target({"metadata": {"namespace": "golden"}, "spec": {"source": {"dataSource": {"name": "x"}}}})
        is None
    )
    assert data_source_target({"metadata": {"namespace": "golden"}, "spec": {}}) is None
