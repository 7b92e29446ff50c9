"""The node agent rewrites a running pod's secret, configMap and downward API volumes from their objects, as the
kubelet's sync does; what it cannot read now keeps its content."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from pykubevirt.node.pod_dirs import PodDir
from pykubevirt.node.volumes import prepare_volumes, refresh_volumes


def test_a_changed_secret_reaches_the_volume_and_an_unreadable_one_keeps_its_files(tmp_path: Path) -> None:
    objects: dict[tuple[str, str], dict[str, Any] | None] = {
        ("Secret", "keys"): {"metadata": {"name": "keys"}, "data": {"k1": base64.b64encode(b"one").decode()}},
        ("ConfigMap", "conf"): {"metadata": {"name": "conf"}, "data": {"a": "1"}},
    }

    async def fetch(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if (kind, name) not in objects:
            raise OSError("connection refused")
        return objects[(kind, name)]

    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "volumes": [
                {"name": "creds", "secret": {"secretName": "keys"}},
                {"name": "settings", "configMap": {"name": "conf"}},
                {"name": "scratch", "emptyDir": {}},
            ]
        },
    }
    pod_dir = PodDir(tmp_path, "u1")
    prepared = asyncio.run(prepare_volumes(pod, pod_dir, fetch))
    creds, settings = Path(prepared.host_paths["creds"]), Path(prepared.host_paths["settings"])
    (Path(prepared.host_paths["scratch"]) / "kept").write_text("mine")
    assert (creds / "k1").read_text() == "one"

    # A key added, a key removed: the volume follows the Secret; emptyDir is left alone.
    objects[("Secret", "keys")] = {"metadata": {"name": "keys"}, "data": {"k2": base64.b64encode(b"two").decode()}}
    assert asyncio.run(refresh_volumes(pod, pod_dir, fetch)) == []
    assert sorted(p.name for p in creds.iterdir()) == ["k2"] and (creds / "k2").read_text() == "two"
    assert (Path(prepared.host_paths["scratch"]) / "kept").read_text() == "mine"

    # The API unreachable for the ConfigMap: its files stay, and the failure is named.
    del objects[("ConfigMap", "conf")]
    failed = asyncio.run(refresh_volumes(pod, pod_dir, fetch))
    assert len(failed) == 1 and failed[0].startswith("settings: ")
    assert (settings / "a").read_text() == "1"
