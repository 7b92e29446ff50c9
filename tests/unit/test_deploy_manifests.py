"""`kubectl apply -k deploy/` installs what a cluster accepts: every rendered object validates offline for v1.30-1.33.

kubectl's own kustomize renders deploy/; built-in kinds are checked against Kubernetes' schemas (strict), custom
resources against the CRDs the render installs. The layout checks keep deploy/ and the generated parts in step.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.virtapi import deploy_rbac
from tests.support.deploy_manifests import (
    DEPLOY,
    KUBE_VERSIONS,
    kubevirt_cr,
    named,
    of_kind,
    problems,
    render,
    rendered,
)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_rendered_object_validates(version: str) -> None:
    objects = rendered()
    found = [p for obj in objects for p in problems(obj, version, objects)]
    assert found == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_the_kubevirt_cr_validates_against_the_installed_crd(version: str) -> None:
    cr = kubevirt_cr()
    assert (cr["apiVersion"], cr["kind"]) == ("kubevirt.io/v1", "KubeVirt")
    assert (cr["metadata"]["name"], cr["metadata"]["namespace"]) == ("kubevirt", "kubevirt")
    assert problems(cr, version, rendered()) == []


def test_validation_catches_what_a_cluster_rejects() -> None:
    objects = rendered()
    deployment = copy.deepcopy(named("Deployment", "virt-controller"))
    deployment["spec"]["template"]["spec"]["containers"][0]["comand"] = ["typo"]
    assert any("comand" in p for p in problems(deployment, "1.33", objects))
    daemonset = copy.deepcopy(named("DaemonSet", "virt-handler"))
    daemonset["spec"]["template"]["spec"]["hostPID"] = "yes"
    assert problems(daemonset, "1.30", objects) != []
    cr = kubevirt_cr()
    cr["spek"] = {}
    cr["spec"]["configuration"]["developerConfiguration"]["featureGates"] = "LiveMigration"
    found = problems(cr, "1.33", objects)
    assert any("spek" in p for p in found) and any("featureGates" in p for p in found)
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert problems(unknown, "1.33", objects) != []


def test_every_generated_crd_is_installed() -> None:
    on_disk = {f"crds/{p.name}" for p in (DEPLOY / "crds").glob("*.yaml")}
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert on_disk <= set(listed), "list every file of deploy/crds in deploy/kustomization.yaml"
    assert len(of_kind("CustomResourceDefinition")) == len(on_disk)


def test_the_datavolume_crd_is_marked_as_cdis_stand_in() -> None:
    for crd in of_kind("CustomResourceDefinition"):
        stand_in = crd["metadata"]["labels"].get("pykubevirt.io/cdi-stand-in") == "true"
        assert stand_in == (crd["spec"]["group"] == "cdi.kubevirt.io")


def test_rbac_is_generated_from_the_shipped_policy() -> None:
    committed = (DEPLOY / "rbac" / "rbac.yaml").read_text()
    assert committed == deploy_rbac.render(), "regenerate with `make crds`"


def test_rbac_matches_kubevirts_identities_and_aggregation() -> None:
    accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in of_kind("ServiceAccount")}
    assert accounts == {
        ("kubevirt", "kubevirt-apiserver"),
        ("kubevirt", "kubevirt-controller"),
        ("kubevirt", "kubevirt-handler"),
        # Bound to no role: the web console forwards with each user's own token.
        ("kubevirt", "pykubevirt-webconsole"),
    }
    for role, verb in (("view", "aggregate-to-view"), ("edit", "aggregate-to-edit"), ("admin", "aggregate-to-admin")):
        labels = named("ClusterRole", f"kubevirt.io:{role}")["metadata"]["labels"]
        assert labels[f"rbac.authorization.k8s.io/{verb}"] == "true"
    assert not [o for o in rendered() if o["metadata"]["name"] in deploy_rbac.EMBEDDED_ONLY]
    for binding in of_kind("ClusterRoleBinding") + of_kind("RoleBinding"):
        role_kind = binding["roleRef"]["kind"]
        name = binding["roleRef"]["name"]
        ours = [o for o in of_kind(role_kind) if o["metadata"]["name"] == name]
        # The rest are kube's own: system:auth-delegator, extension-apiserver-authentication-reader.
        assert ours or name in ("system:auth-delegator", "extension-apiserver-authentication-reader"), name


def test_workloads_run_as_their_service_accounts_with_the_roles_they_need() -> None:
    accounts = {sa["metadata"]["name"] for sa in of_kind("ServiceAccount")}
    expected = {
        "virt-api": "kubevirt-apiserver",
        "virt-controller": "kubevirt-controller",
        "pykubevirt-webconsole": "pykubevirt-webconsole",
    }
    for deployment in of_kind("Deployment"):
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert account == expected[deployment["metadata"]["name"]] and account in accounts
    (handler,) = of_kind("DaemonSet")
    assert handler["spec"]["template"]["spec"]["serviceAccountName"] == "kubevirt-handler"
    for workload in of_kind("Deployment") + of_kind("DaemonSet"):
        spec = workload["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        # KubeVirt's components are cluster-critical; the web console is not.
        if workload["metadata"]["name"] != "pykubevirt-webconsole":
            priority = spec["template"]["spec"]["priorityClassName"]
            assert [p for p in of_kind("PriorityClass") if p["metadata"]["name"] == priority]
        assert workload["metadata"]["namespace"] == "kubevirt"
    assert [n for n in of_kind("Namespace") if n["metadata"]["name"] == "kubevirt"]


def test_virt_handler_is_privileged_with_kubevirts_host_paths() -> None:
    pod = named("DaemonSet", "virt-handler")["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {
        "/var/run/kubevirt",
        "/var/run/kubevirt-private",
        "/var/run/kubevirt-libvirt-runtimes",
        "/var/lib/kubevirt",
        "/var/lib/kubelet/pods",
        "/var/lib/kubelet",
        "/dev",
    } <= host_paths
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["virt-share-dir"]["mountPropagation"] == "Bidirectional"
    assert mounts["kubelet-pods"]["mountPath"] == "/pods"


def _image_names(objects: list[dict[str, Any]]) -> set[str]:
    images: set[str] = set()
    for workload in objects:
        if workload["kind"] in ("Deployment", "DaemonSet"):
            for container in workload["spec"]["template"]["spec"]["containers"]:
                images.add(container["image"])
                images |= {e["value"] for e in container.get("env", []) if e["name"] == "VIRT_LAUNCHER_IMAGE"}
    return images


def test_images_are_retagged_by_kustomize(tmp_path: Path) -> None:
    assert _image_names(list(rendered())) == {"pykubevirt:latest", "virt-launcher:latest"}
    overlay = {
        # kustomize takes only relative paths to other kustomizations.
        "resources": [os.path.relpath(DEPLOY, tmp_path)],
        "images": [
            {"name": "pykubevirt", "newName": "registry.example/pykubevirt", "newTag": "git-0123abc"},
            {"name": "virt-launcher", "newName": "registry.example/virt-launcher", "newTag": "git-0123abc"},
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    assert _image_names(render(tmp_path)) == {
        "registry.example/pykubevirt:git-0123abc",
        "registry.example/virt-launcher:git-0123abc",
    }
