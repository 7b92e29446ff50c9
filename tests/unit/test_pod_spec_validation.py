"""ValidatePodSpec's volume source, environment variable and probe checks, on plain data."""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.pod_spec_validation import env_causes, probe_causes, volume_source_causes

ENV_NAME = "a valid environment variable name must consist only of printable ASCII characters other than '='"


def rendered(causes: list[dict[str, Any]]) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in causes]


def test_a_volume_names_exactly_one_source() -> None:
    assert volume_source_causes("spec.volumes[0]", {"name": "v", "emptyDir": {}}) == []
    assert rendered(
        volume_source_causes("spec.volumes[0]", {"name": "v", "configMap": {"name": "c"}, "emptyDir": {}})
    ) == ["spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type"]
    # kube reports the later sources under its own spelling of their paths.
    three = {"name": "v", "hostPath": {"path": "/x"}, "cephfs": {}, "downwardAPI": {}}
    assert rendered(volume_source_causes("spec.volumes[1]", three)) == [
        "spec.volumes[1].cephFS: Forbidden: may not specify more than 1 volume type",
        "spec.volumes[1].downwarAPI: Forbidden: may not specify more than 1 volume type",
    ]
    assert rendered(volume_source_causes("spec.volumes[0]", {"name": "v"})) == [
        "spec.volumes[0]: Required value: must specify a volume type"
    ]


def test_a_source_names_what_it_mounts() -> None:
    assert rendered(volume_source_causes("spec.volumes[0]", {"name": "v", "secret": {}})) == [
        "spec.volumes[0].secret.secretName: Required value"
    ]
    assert rendered(
        volume_source_causes("spec.volumes[0]", {"name": "v", "persistentVolumeClaim": {"readOnly": True}})
    ) == ["spec.volumes[0].persistentVolumeClaim.claimName: Required value"]


def test_env_names_are_printable_ascii_without_an_equals_sign() -> None:
    ok = [{"name": "my.env-name"}, {"name": "1_starts with a digit and has spaces"}, {"name": "A", "value": "x=y"}]
    assert env_causes("spec.containers[0].env", ok) == []
    assert rendered(env_causes("spec.containers[0].env", [{"name": "A=B"}, {"name": "é"}, {"value": "v"}])) == [
        'spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of '
        "printable ASCII characters other than '='",
        'spec.containers[0].env[1].name: Invalid value: "é": a valid environment variable name must consist only of '
        "printable ASCII characters other than '='",
        "spec.containers[0].env[2].name: Required value",
        'spec.containers[0].env[2].name: Invalid value: "": environment variable name must be non-empty',
    ]


def test_an_env_value_comes_from_one_place() -> None:
    at = "spec.containers[0].env"
    both = {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    two = {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}, "secretKeyRef": {"name": "s", "key": "k"}}}
    none = {"name": "C", "valueFrom": {}}
    keyless = {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "c"}}}
    assert rendered(env_causes(at, [both, two, none, keyless])) == [
        'spec.containers[0].env[0].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
        'spec.containers[0].env[1].valueFrom: Invalid value: "": may not have more than one field specified at a time',
        'spec.containers[0].env[2].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, '
        "`configMapKeyRef` or `secretKeyRef`",
        "spec.containers[0].env[3].valueFrom.configMapKeyRef.key: Required value",
    ]


def test_a_probe_has_one_handler_and_sane_counts() -> None:
    at = "spec.containers[0].livenessProbe"
    assert probe_causes(at, {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10}, "livenessProbe") == []
    assert probe_causes(at, {"httpGet": {"port": "http"}}, "livenessProbe") == []  # a named port
    assert rendered(probe_causes(at, {"exec": {}, "tcpSocket": {"port": 22}}, "livenessProbe")) == [
        "spec.containers[0].livenessProbe.exec.command: Required value",
        "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
    ]
    assert rendered(probe_causes(at, {"periodSeconds": -1, "successThreshold": 2}, "livenessProbe")) == [
        "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
        "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
        "spec.containers[0].livenessProbe: Required value: must specify a handler type",
    ]
    ready = "spec.containers[0].readinessProbe"
    assert probe_causes(ready, {"tcpSocket": {"port": 80}, "successThreshold": 3}, "readinessProbe") == []
    assert rendered(probe_causes(ready, {"tcpSocket": {"port": 70000}}, "readinessProbe")) == [
        "spec.containers[0].readinessProbe.tcpSocket.port: Invalid value: 70000: must be between 1 and 65535, inclusive"
    ]
