"""ConfigMap, Secret, DownwardAPI, ServiceAccount and Sysprep volumes become ISO disks, as KubeVirt's pkg/config."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from pykubevirt.launcher.config_disks import ConfigDiskError, config_disks, prepare_config_disks
from pykubevirt.launcher.iso_image import ISO_CYLINDER_BYTES


def vmi(volumes: list[dict[str, Any]], disks: list[str]) -> dict[str, Any]:
    devices = {"disks": [{"name": name, "disk": {}} for name in disks]}
    return {"spec": {"domain": {"devices": devices}, "volumes": volumes}}


def iso_files(path: Path) -> tuple[str, dict[str, bytes]]:
    """The ISO's volume label and its files by Rock Ridge path."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        found: dict[str, bytes] = {}
        for root, _, files in iso.walk(rr_path="/"):
            for name in files:
                rr = f"{root.rstrip('/')}/{name}"
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, rr_path=rr)
                found[rr.lstrip("/")] = out.getvalue()
        return label, found
    finally:
        iso.close()


def test_only_config_volumes_a_disk_uses_become_isos_sysprep_always() -> None:
    volumes = [
        {"name": "cfg", "configMap": {"name": "app", "volumeLabel": "APPCFG"}},
        {"name": "sec", "secret": {"secretName": "creds"}},
        {"name": "fs-only", "configMap": {"name": "app"}},
        {"name": "labels", "downwardAPI": {"fields": []}},
        {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}},
        {"name": "unattend", "sysprep": {"configMap": {"name": "win"}}},
        {"name": "root", "containerDisk": {"image": "x"}},
    ]
    found = config_disks(vmi(volumes, ["root", "cfg", "sec", "labels", "sa"]))
    assert [(d.volume, d.source, d.iso, d.label) for d in found] == [
        ("cfg", "/var/run/kubevirt-private/config-map/cfg", "config-map-disks/cfg.iso", "APPCFG"),
        ("sec", "/var/run/kubevirt-private/secret/sec", "secret-disks/sec.iso", "cfgdata"),
        ("labels", "/var/run/kubevirt-private/downwardapi/labels", "downwardapi-disks/labels.iso", "cfgdata"),
        ("sa", "/var/run/secrets/kubernetes.io/serviceaccount", "service-account-disk/service-account.iso", "cfgdata"),
        ("unattend", "/var/run/kubevirt-private/sysprep/unattend", "sysprep-disks/unattend.iso", "unattendCD"),
    ]


def test_the_iso_carries_every_key_by_its_name_nested_paths_kept(tmp_path: Path) -> None:
    mounted = tmp_path / "pod" / "cfg"
    (mounted / "conf.d").mkdir(parents=True)
    (mounted / "DATABASE").write_bytes(b"staging")
    (mounted / "app.properties").write_bytes(b"a=1\n")
    (mounted / "app_properties").write_bytes(b"same ISO9660 name\n")
    (mounted / "conf.d" / "x.yaml").write_bytes(b"k: v\n")
    (mounted / "..data").mkdir()
    (mounted / "..data" / "hidden").write_bytes(b"kubelet bookkeeping")
    spec = vmi([{"name": "cfg", "configMap": {"name": "app", "volumeLabel": "APPCFG"}}], ["cfg"])
    asyncio.run(prepare_config_disks(spec, lambda path: tmp_path / "pod" / Path(path).name, tmp_path / "private"))
    iso = tmp_path / "private" / "config-map-disks" / "cfg.iso"
    assert iso.stat().st_size % ISO_CYLINDER_BYTES == 0
    label, files = iso_files(iso)
    assert label == "APPCFG"
    assert files == {
        "DATABASE": b"staging",
        "app.properties": b"a=1\n",
        "app_properties": b"same ISO9660 name\n",
        "conf.d/x.yaml": b"k: v\n",
    }


def test_a_sysprep_volume_needs_an_unattend_file_and_a_missing_mount_is_said(tmp_path: Path) -> None:
    (tmp_path / "unattend").mkdir()
    (tmp_path / "unattend" / "other.xml").write_bytes(b"<x/>")
    spec = vmi([{"name": "unattend", "sysprep": {"secret": {"name": "win"}}}], [])
    with pytest.raises(ConfigDiskError) as refused:
        asyncio.run(prepare_config_disks(spec, lambda path: tmp_path / Path(path).name, tmp_path / "private"))
    assert str(refused.value) == "Sysprep drive should contain autounattend.xml or unattend.xml but neither were found."
    (tmp_path / "unattend" / "Autounattend.xml").write_bytes(b"<unattend/>")
    asyncio.run(prepare_config_disks(spec, lambda path: tmp_path / Path(path).name, tmp_path / "private"))
    assert iso_files(tmp_path / "private" / "sysprep-disks" / "unattend.iso")[0] == "unattendCD"

    missing = vmi([{"name": "cfg", "secret": {"secretName": "s"}}], ["cfg"])
    with pytest.raises(ConfigDiskError) as nothing:
        asyncio.run(prepare_config_disks(missing, lambda path: tmp_path / "nowhere", tmp_path / "private"))
    assert str(nothing.value) == "volume cfg: nothing is mounted at /var/run/kubevirt-private/secret/cfg"


def test_long_configmap_keys_keep_their_names_in_rock_ridge(tmp_path: Path) -> None:
    """Joliet keeps 64 characters of a name (as xorrisofs does); Rock Ridge, which Linux guests read, keeps them all."""
    mounted = tmp_path / "cfg"
    mounted.mkdir()
    long_names = ["k" * 70 + ".properties", "k" * 70 + ".yaml"]
    for name in long_names:
        (mounted / name).write_bytes(name.encode())
    spec = vmi([{"name": "cfg", "configMap": {"name": "app"}}], ["cfg"])
    asyncio.run(prepare_config_disks(spec, lambda path: mounted, tmp_path / "private"))
    assert iso_files(tmp_path / "private" / "config-map-disks" / "cfg.iso")[1] == {n: n.encode() for n in long_names}
