"""deploy/'s containers run real `pykubevirt` subcommands: their command lines parse with the CLI's own parser.

The kubelet expands $(VAR) in args from the container's env (downward-API fields included); the test does the same,
so a renamed flag, a removed subcommand or an undefined variable in a manifest fails here, not on a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from typing import Any

import pytest

from pykubevirt.cli.controller_command import launcher_settings
from pykubevirt.cli.main import build_parser
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.app import LEASE_NAME, LEASE_NAMESPACE
from pykubevirt.controller.launcher_pod import LauncherSettings
from tests.support.deploy_manifests import named, of_kind, rendered

# What the downward API gives the fields the manifests read.
FIELD_VALUES = {"spec.nodeName": "node01", "metadata.name": "virt-controller-7d9f-abcde", "status.podIP": "10.0.0.5"}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, pod spec, container) of every Deployment and DaemonSet container in deploy/."""
    found = []
    for workload in of_kind("Deployment") + of_kind("DaemonSet"):
        pod = workload["spec"]["template"]["spec"]
        found += [(workload["metadata"]["name"], pod, c) for c in pod["containers"] + pod.get("initContainers", [])]
    return found


def expanded_args(container: dict[str, Any]) -> list[str]:
    """The container's command and args after the kubelet's $(VAR) expansion; an undefined variable fails."""
    env: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = FIELD_VALUES[variable["valueFrom"]["fieldRef"]["fieldPath"]]

    def expand(arg: str) -> str:
        for name in _REFERENCE.findall(arg):
            assert name in env, f"{container['name']}: $({name}) is not in the container's env"
        return _REFERENCE.sub(lambda m: env[m.group(1)], arg)

    return [expand(a) for a in container["command"] + container.get("args", [])]


def parse(argv: list[str]) -> argparse.Namespace:
    """`pykubevirt ARGV` as the CLI parses it; a usage error fails the test with argparse's message."""
    assert argv[0] == "pykubevirt", argv
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{' '.join(argv)}: {errors.getvalue()}")


def mount_paths(container: dict[str, Any]) -> set[str]:
    return {m["mountPath"] for m in container.get("volumeMounts", [])}


@pytest.mark.parametrize(
    ("workload", "subcommand"),
    [
        ("virt-api", "virt-api"),
        ("virt-controller", "virt-controller"),
        ("virt-handler", "virt-handler"),
        ("pykubevirt-webconsole", "webconsole"),
    ],
)
def test_each_component_runs_its_subcommand(workload: str, subcommand: str) -> None:
    (container,) = [c for name, _, c in containers() if name == workload]
    args = parse(expanded_args(container))
    assert args.command == subcommand
    assert args.func.__module__.startswith("pykubevirt.cli.")


def test_every_container_command_parses() -> None:
    assert len(containers()) == 4
    for _, _, container in containers():
        parse(expanded_args(container))


def test_virt_handler_serves_the_node_it_runs_on_from_its_mounts() -> None:
    ((_, _, container),) = [(n, p, c) for n, p, c in containers() if n == "virt-handler"]
    args = parse(expanded_args(container))
    assert args.node_name == FIELD_VALUES["spec.nodeName"]
    mounts = mount_paths(container)
    assert args.data_dir in mounts and args.pods_dir in mounts
    # Migration TLS: the certificates' directory is a volume (an optional Secret), and nothing is created there.
    assert args.certificates_dir in mounts and not args.create_certificates
    # Its API listens on the pod's IP, which virt-api reaches across pods, only over mutual TLS.
    assert args.node_ip == FIELD_VALUES["status.podIP"] and args.mutual_tls
    # On KubeVirt's port, which the readiness probe asks over TLS for the path the handler leaves open to probes.
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"scheme": "HTTPS", "port": args.api_port, "path": "/healthz"} and args.api_port == 8186
    assert {p["containerPort"] for p in container["ports"]} == {args.api_port}
    assert "livenessProbe" not in container


def test_the_handlers_certificates_go_from_virt_controller_to_virt_handler_and_virt_api() -> None:
    from pykubevirt.controller.kubevirt_certificates import CLIENT_SECRET, SERVER_SECRET

    controller = named("Deployment", "virt-controller")
    namespace = controller["metadata"]["namespace"]
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert parse(expanded_args(container)).certificates_namespace == namespace
    (secrets_rule,) = [r for r in named("Role", "kubevirt-controller")["rules"] if "secrets" in r["resources"]]
    assert {"get", "create", "update"} <= set(secrets_rule["verbs"])

    def secrets_behind(pod: dict[str, Any], container: dict[str, Any], directory: str) -> list[str]:
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        if "secret" in volume:
            return [volume["secret"]["secretName"]]
        return [source["secret"]["name"] for source in volume["projected"]["sources"]]

    ((_, pod, handler),) = [(n, p, c) for n, p, c in containers() if n == "virt-handler"]
    directory = parse(expanded_args(handler)).certificates_dir
    assert secrets_behind(pod, handler, directory) == [CLIENT_SECRET, SERVER_SECRET]
    # virt-api holds the client half only: no server key leaves the handlers.
    ((_, pod, api),) = [(n, p, c) for n, p, c in containers() if n == "virt-api"]
    directory = parse(expanded_args(api)).handler_certificates_dir
    assert secrets_behind(pod, api, directory) == [CLIENT_SECRET]
    for workload in (named("DaemonSet", "virt-handler"), named("Deployment", "virt-api")):
        assert workload["metadata"]["namespace"] == namespace


def test_virt_api_keeps_its_ca_on_a_mounted_volume() -> None:
    ((_, _, container),) = [(n, p, c) for n, p, c in containers() if n == "virt-api"]
    args = parse(expanded_args(container))
    assert args.data_dir in mount_paths(container)
    assert args.namespace == named("Service", "virt-api")["metadata"]["namespace"]
    ports = {p["containerPort"] for p in container["ports"]}
    host, port = args.listen
    assert host == "0.0.0.0" and port in ports


def test_virt_controller_replicas_elect_a_leader_under_their_own_rbac() -> None:
    deployment = named("Deployment", "virt-controller")
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = parse(expanded_args(container))
    assert args.no_leader_election is False
    # Each replica's identity is its pod's name, so the two never share one.
    assert args.identity == FIELD_VALUES["metadata.name"]
    assert args.launcher_image == "virt-launcher:latest"
    # A leader that dies without releasing the lease is replaced within 15 s (issue 19's bound), and the timing is
    # one client-go would accept.
    assert args.leader_elect_lease_duration + args.leader_elect_retry_period <= 15
    assert args.leader_elect_lease_duration > args.leader_elect_renew_deadline > 1.2 * args.leader_elect_retry_period
    # The liveness probe reaches the endpoint the controller serves.
    host, _, port = args.metrics_listen.rpartition(":")
    assert host == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"]["port"] == int(port)
    # Readiness is KubeVirt's /leader on the same endpoint: every replica answers it, saying whether it leads.
    assert container["readinessProbe"]["httpGet"] == {"scheme": "HTTP", "port": int(port), "path": "/leader"}
    assert {p["containerPort"] for p in container["ports"]} == {int(port)}
    # The Lease lives in the controller's namespace, and its Role there lets the controller take and renew it.
    assert LEASE_NAMESPACE == deployment["metadata"]["namespace"]
    role = named("Role", "kubevirt-controller")
    assert role["metadata"]["namespace"] == LEASE_NAMESPACE
    (lease_rule,) = [r for r in role["rules"] if "leases" in r["resources"]]
    assert lease_rule["apiGroups"] == ["coordination.k8s.io"]
    assert {"get", "create", "update"} <= set(lease_rule["verbs"])
    assert "resourceNames" not in lease_rule or LEASE_NAME in lease_rule["resourceNames"]
    (binding,) = [b for b in of_kind("RoleBinding") if b["roleRef"]["name"] == "kubevirt-controller"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert {"kind": "ServiceAccount", "name": account, "namespace": LEASE_NAMESPACE} in binding["subjects"]


def test_an_undefined_variable_or_a_wrong_flag_is_caught() -> None:
    container = {"name": "c", "command": ["pykubevirt", "virt-handler"], "args": ["--node-name=$(NODE)"]}
    with pytest.raises(AssertionError, match=r"\$\(NODE\)"):
        expanded_args(container)
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --pod-ip-address"):
        parse(["pykubevirt", "virt-handler", "--node-name=n", "--pod-ip-address=1.2.3.4"])
    assert rendered()


def test_the_launcher_image_flag_reaches_the_launcher_pods() -> None:
    container = named("Deployment", "virt-controller")["spec"]["template"]["spec"]["containers"][0]
    settings = launcher_settings(parse(expanded_args(container)), ClusterConfig())
    assert settings.image == "virt-launcher:latest"
    unset = launcher_settings(parse(["pykubevirt", "virt-controller"]), ClusterConfig())
    assert unset.image == LauncherSettings().image
