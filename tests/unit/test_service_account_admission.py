"""kube's ServiceAccount admission, its pure part: whether a pod gets its account's token, and how it is mounted."""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.service_account_admission import (
    TOKEN_MOUNT_PATH,
    mount_token,
    should_automount,
    token_volume,
)


def spec(*containers: str, init: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": c} for c in containers], **fields}
    if init:
        body["initContainers"] = [{"name": c} for c in init]
    return body


def test_the_pods_choice_comes_before_its_accounts_and_both_default_to_mounting() -> None:
    assert should_automount({}, None) is True
    assert should_automount({}, {"metadata": {"name": "default"}}) is True
    assert should_automount({}, {"automountServiceAccountToken": False}) is False
    assert should_automount({"automountServiceAccountToken": True}, {"automountServiceAccountToken": False}) is True
    assert should_automount({"automountServiceAccountToken": False}, {"automountServiceAccountToken": True}) is False


def test_the_volume_is_kubes_kube_api_access_layout() -> None:
    volume = token_volume("kube-api-access-abcde")
    assert volume == {
        "name": "kube-api-access-abcde",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }


def test_every_container_and_init_container_mounts_one_generated_volume() -> None:
    pod = spec("main", "sidecar", init=("setup",), volumes=[{"name": "data", "emptyDir": {}}])
    mount_token(pod)
    data, token = pod["volumes"]
    assert data == {"name": "data", "emptyDir": {}}
    assert token["name"].startswith("kube-api-access-") and len(token["name"]) == len("kube-api-access-") + 5
    expected = [{"name": token["name"], "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}]
    assert [c["volumeMounts"] for c in pod["containers"] + pod["initContainers"]] == [expected] * 3


def test_a_container_with_its_own_mount_at_the_path_keeps_it() -> None:
    own = {"name": "mine", "mountPath": TOKEN_MOUNT_PATH}
    pod = spec("main", volumes=[{"name": "mine", "secret": {"secretName": "s"}}])
    pod["containers"][0]["volumeMounts"] = [own]
    mount_token(pod)
    assert pod["containers"][0]["volumeMounts"] == [own]
    assert [v["name"] for v in pod["volumes"]] == ["mine"]


def test_a_pod_that_has_a_kube_api_access_volume_gets_mounts_of_it_and_no_second_one() -> None:
    pod = spec("main", volumes=[{"name": "kube-api-access-given", "emptyDir": {}}])
    mount_token(pod)
    assert pod["volumes"] == [{"name": "kube-api-access-given", "emptyDir": {}}]
    assert pod["containers"][0]["volumeMounts"][0]["name"] == "kube-api-access-given"
