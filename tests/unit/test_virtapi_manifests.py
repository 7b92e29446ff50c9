"""deploy/virt-api agrees with the code: webhook paths served, KubeVirt's webhook names, APIServices, identity."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.context import KUBEVIRT_SERVICE_ACCOUNT_PREFIX
from pykubevirt.cli.virtapi_command import SERVICE_NAMES
from pykubevirt.virtapi import discovery
from pykubevirt.virtapi.cluster import MUTATING_WEBHOOK_NAME, VALIDATING_WEBHOOK_NAME
from pykubevirt.virtapi.eviction_webhook import EVICTION_PATH
from pykubevirt.virtapi.webhooks import MUTATING_PATHS, VALIDATING_PATHS
from tests.support.deploy_manifests import DEPLOY, named, render
from tests.support.deploy_manifests import of_kind as installed


def of_kind(kind: str) -> list[dict[str, Any]]:
    """virt-api's own objects, as `kubectl kustomize deploy/virt-api` renders them."""
    return [d for d in render(DEPLOY / "virt-api") if d["kind"] == kind]


def test_webhooks_point_at_served_paths_with_kubevirt_names() -> None:
    (mutating,) = of_kind("MutatingWebhookConfiguration")
    (validating,) = of_kind("ValidatingWebhookConfiguration")
    assert mutating["metadata"]["name"] == MUTATING_WEBHOOK_NAME
    assert validating["metadata"]["name"] == VALIDATING_WEBHOOK_NAME
    assert {h["clientConfig"]["service"]["path"] for h in mutating["webhooks"]} == set(MUTATING_PATHS)
    assert {h["clientConfig"]["service"]["path"] for h in validating["webhooks"]} == {*VALIDATING_PATHS, EVICTION_PATH}
    names = {h["name"] for h in mutating["webhooks"] + validating["webhooks"]}
    assert {
        "virtualmachines-mutator.kubevirt.io",
        "virtualmachineinstances-mutator.kubevirt.io",
        "migrations-mutator.kubevirt.io",
        "virtualmachine-validator.kubevirt.io",
        "virtualmachineinstances-create-validator.kubevirt.io",
        "virtualmachineinstances-update-validator.kubevirt.io",
        "migration-create-validator.kubevirt.io",
    } <= names
    for hook in mutating["webhooks"] + validating["webhooks"]:
        service = hook["clientConfig"]["service"]
        assert (service["namespace"], service["name"]) == ("kubevirt", "virt-api")
        # The eviction interceptor marks the VMI for evacuation, a side effect it skips on dry runs, as KubeVirt's.
        side_effects = "NoneOnDryRun" if service["path"] == EVICTION_PATH else "None"
        assert hook["sideEffects"] == side_effects and hook["admissionReviewVersions"] == ["v1"]


def test_apiservices_and_service() -> None:
    services = of_kind("APIService")
    assert sorted(s["metadata"]["name"] for s in services) == sorted(
        f"{v}.{discovery.GROUP}" for v in discovery.VERSIONS
    )
    for service in services:
        assert service["spec"]["service"] == {"namespace": "kubevirt", "name": "virt-api", "port": 443}
    (svc,) = of_kind("Service")
    assert svc["spec"]["ports"][0]["targetPort"] == 8443
    assert f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" in SERVICE_NAMES


def test_virt_api_runs_as_a_kubevirt_service_account() -> None:
    (deployment,) = of_kind("Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    sa = named("ServiceAccount", account)
    assert f"system:serviceaccount:{sa['metadata']['namespace']}:{account}".startswith(KUBEVIRT_SERVICE_ACCOUNT_PREFIX)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["pykubevirt", "virt-api"]
    assert container["readinessProbe"]["httpGet"]["path"] == f"/apis/{discovery.GROUP}/v1/healthz"


def test_virt_api_may_publish_its_ca_into_what_it_serves() -> None:
    (role,) = [r for r in installed("ClusterRole") if r["metadata"]["name"] == "kubevirt-apiserver"]
    granted = {
        (resource, name)
        for rule in role["rules"]
        if "patch" in rule["verbs"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", [])
    }
    published = {("apiservices", s["metadata"]["name"]) for s in of_kind("APIService")}
    published.add(("mutatingwebhookconfigurations", MUTATING_WEBHOOK_NAME))
    published.add(("validatingwebhookconfigurations", VALIDATING_WEBHOOK_NAME))
    assert published <= granted


def test_the_service_reaches_the_port_virt_api_listens_on() -> None:
    (deployment,) = of_kind("Deployment")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    (svc,) = of_kind("Service")
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
    assert container["readinessProbe"]["httpGet"]["port"] in ports
    assert container["livenessProbe"]["httpGet"]["port"] in ports
    (listen,) = [a for a in container["args"] if a.startswith("--listen=")]
    assert int(listen.rpartition(":")[2]) in ports
