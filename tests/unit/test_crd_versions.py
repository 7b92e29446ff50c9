"""A CRD's several versions: KubeVirt's older versions in its CRDs, kube's rules for them, and conversion None."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kinds import ALL_KINDS, VIRTUAL_MACHINE, VIRTUAL_MACHINE_POOL
from pykubevirt.api.name_validation import dns1035_label_errors
from pykubevirt.apiserver.crds import crd_problems, resources_of
from pykubevirt.apiserver.served_versions import served, stored


def test_kubevirts_core_kinds_are_served_as_v1alpha3_too_deprecated_with_its_warning() -> None:
    versions = crd_manifest(VIRTUAL_MACHINE)["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"], v.get("deprecated", False)) for v in versions] == [
        ("v1", True, True, False),
        ("v1alpha3", True, False, True),
    ]
    assert (
        versions[1]["deprecationWarning"]
        == "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."
    )
    assert versions[1]["schema"] is versions[0]["schema"]
    assert versions[1]["additionalPrinterColumns"] == versions[0]["additionalPrinterColumns"]
    pool = crd_manifest(VIRTUAL_MACHINE_POOL)["spec"]["versions"]
    assert [(v["name"], v["storage"], v.get("deprecated", False)) for v in pool] == [
        ("v1beta1", True, False),
        ("v1alpha1", False, False),
    ]
    with_older = sorted(k.plural for k in ALL_KINDS if k.older_versions)
    assert with_older == [
        "kubevirts",
        "virtualmachineclones",
        "virtualmachineexports",
        "virtualmachineinstancemigrations",
        "virtualmachineinstancereplicasets",
        "virtualmachineinstances",
        "virtualmachinepools",
        "virtualmachinerestores",
        "virtualmachines",
        "virtualmachinesnapshotcontents",
        "virtualmachinesnapshots",
    ]


def crd(*versions: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "dials.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "dials", "kind": "Dial"},
            "versions": list(versions),
        },
    }


def version(name: str, *, storage: bool = False, **extra: Any) -> dict[str, Any]:
    return {"name": name, "served": True, "storage": storage, **extra}


def test_every_served_version_is_a_resource_stored_as_the_storage_version_and_sharing_equal_schemas() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    resources = resources_of(
        crd(
            version("v1alpha1", schema={"openAPIV3Schema": dict(schema)}, deprecated=True),
            version("v1beta1", served=False),
            version("v1", storage=True, schema={"openAPIV3Schema": dict(schema)}),
        )
    )
    assert [(r.version, r.storage_version) for r in resources] == [("v1alpha1", "v1"), ("v1", "v1")]
    assert resources[0].schema is resources[1].schema
    # kube's default names the highest served version that is not deprecated.
    assert resources[0].deprecation_warning == "example.com/v1alpha1 Dial is deprecated; use example.com/v1 Dial"
    assert resources[1].deprecation_warning == ""


@pytest.mark.parametrize(
    ("versions", "warning"),
    [
        ([version("v1", storage=True, deprecated=True)], "example.com/v1 Dial is deprecated"),
        (
            [version("v2", storage=True, deprecated=True, deprecationWarning="gone soon"), version("v3")],
            "gone soon",
        ),
        (
            [version("v1beta1", deprecated=True), version("v1beta2"), version("v1", storage=True)],
            "example.com/v1beta1 Dial is deprecated; use example.com/v1 Dial",
        ),
    ],
)
def test_the_deprecation_warning(versions: list[dict[str, Any]], warning: str) -> None:
    assert resources_of(crd(*versions))[0].deprecation_warning == warning


def test_an_object_changes_only_its_api_version_between_versions() -> None:
    alpha, ga = resources_of(crd(version("v1alpha1"), version("v1", storage=True)))
    obj = {"apiVersion": "example.com/v1alpha1", "kind": "Dial", "metadata": {"name": "a"}, "spec": {"size": 1}}
    kept = stored(alpha, obj)
    assert kept == {**obj, "apiVersion": "example.com/v1"} and obj["apiVersion"] == "example.com/v1alpha1"
    assert kept["spec"] is obj["spec"]
    assert served(alpha, kept) == obj
    assert served(ga, kept) is kept and stored(ga, kept) is kept


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        (
            [version("v1", storage=True), version("v2", storage=True)],
            'Invalid value: ["v1", "v2"]: must have exactly one version marked as storage version',
        ),
        ([version("v1"), version("v2")], 'Invalid value: ["v1", "v2"]: must have exactly one version'),
        (
            [version("v1", storage=True), version("v1")],
            'Invalid value: ["v1", "v1"]: must contain unique version names',
        ),
    ],
)
def test_kubes_rules_for_the_versions_together(versions: list[dict[str, Any]], message: str) -> None:
    causes = crd_problems(crd(*versions))
    assert [c["field"] for c in causes] == ["spec.versions"]
    assert causes[0]["message"].startswith(message)


def test_a_version_name_is_a_dns_1035_label() -> None:
    causes = crd_problems(crd(version("1v", storage=True)))
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.versions[0].name",
            "message": 'Invalid value: "1v": a DNS-1035 label must consist of lower case alphanumeric characters or '
            "'-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
            "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        }
    ]
    assert dns1035_label_errors("v1beta1") == []
    assert dns1035_label_errors("a" * 64)[0] == "must be no more than 63 characters"
