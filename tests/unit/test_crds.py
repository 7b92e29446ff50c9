"""The committed CRDs are exactly what the model generates, and every schema is structural."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pykubevirt.api.crd import all_crd_files, crd_manifest
from pykubevirt.api.kinds import ALL_KINDS, KindSpec
from pykubevirt.api.structural import structural_violations

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_committed_crds_match_the_model() -> None:
    generated = all_crd_files()
    committed = {p.name: p.read_text() for p in DEPLOY.glob("*.yaml")}
    assert set(committed) == set(generated), "regenerate with `make crds`"
    for name, text in generated.items():
        assert committed[name] == text, f"{name} differs from the model; regenerate with `make crds`"


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: KindSpec) -> None:
    assert structural_violations(kind.schema) == []


def test_structural_check_catches_what_kube_apiserver_rejects() -> None:
    bad = {
        "type": "object",
        "properties": {
            "ref": {"$ref": "#/definitions/x"},
            "untyped": {"description": "no type"},
            "both": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "nullable": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "unique": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "list": {"type": "array"},
        },
    }
    problems = structural_violations(bad)
    assert any("$ref" in p for p in problems)
    assert any(p.startswith("untyped") and "type must be specified" in p for p in problems)
    assert any("mutually exclusive" in p for p in problems)
    assert any("nullable.anyOf" in p for p in problems)
    assert any("uniqueItems" in p for p in problems)
    assert any("items must be specified" in p for p in problems)
    quantity = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    assert structural_violations(quantity) == []


def test_crd_names_columns_and_subresources() -> None:
    by_kind = {k.kind: crd_manifest(k) for k in ALL_KINDS}
    vm = by_kind["VirtualMachine"]
    assert vm["metadata"]["name"] == "virtualmachines.kubevirt.io"
    assert vm["spec"]["names"]["shortNames"] == ["vm", "vms"]
    assert vm["spec"]["names"]["categories"] == ["all"]
    version = vm["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("Age", ".metadata.creationTimestamp"),
        ("Status", ".status.printableStatus"),
        ("Ready", ".status.conditions[?(@.type=='Ready')].status"),
    ]
    vmi = by_kind["VirtualMachineInstance"]["spec"]["versions"][0]
    assert [c["name"] for c in vmi["additionalPrinterColumns"]] == [
        "Age",
        "Phase",
        "IP",
        "NodeName",
        "Ready",
        "Live-Migratable",
        "Paused",
    ]
    assert [c.get("priority", 0) for c in vmi["additionalPrinterColumns"]] == [0, 0, 0, 0, 0, 1, 1]
    assert by_kind["VirtualMachineInstanceMigration"]["spec"]["names"]["shortNames"] == ["vmim", "vmims"]
    assert by_kind["DataVolume"]["spec"]["names"]["shortNames"] == ["dv", "dvs"]
    assert by_kind["VirtualMachineClusterInstancetype"]["spec"]["scope"] == "Cluster"


def test_crd_yaml_has_no_aliases() -> None:
    for text in all_crd_files().values():
        assert "&id" not in text and "*id" not in text
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"
