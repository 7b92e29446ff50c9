"""cloud-init data, metadata and ISOs, mirrored from upstream's pkg/cloud-init/cloud-init_test.go and §5.5."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from pykubevirt.launcher import cloudinit as ci

UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"


def new_vmi(
    name: str = "testvmi", namespace: str = "testns", source: str = "cloudInitNoCloud", **source_fields: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "domain": {"firmware": {"uuid": UUID}},
            "volumes": [
                {"name": "rootdisk", "containerDisk": {"image": "x"}},
                {"name": "cloudinit", source: source_fields or {"userData": "#cloud-config\n"}},
            ],
        },
    }


def read_iso(path: Path) -> tuple[str, dict[str, bytes], dict[str, bytes], set[str]]:
    """Volume id, files by Rock Ridge path, files by Joliet path, and every Rock Ridge path."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        label = iso.pvd.volume_identifier.decode().rstrip()
        rr_paths: set[str] = set()
        by_rr: dict[str, bytes] = {}
        by_joliet: dict[str, bytes] = {}
        for root, _dirs, files in iso.walk(rr_path="/"):
            rr_paths.add(root)
            for name in files:
                full = f"{root.rstrip('/')}/{name}"
                rr_paths.add(full)
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, rr_path=full)
                by_rr[full] = out.getvalue()
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, joliet_path=full)
                by_joliet[full] = out.getvalue()
        return label, by_rr, by_joliet, rr_paths
    finally:
        iso.close()


# ---- metadata ----


def test_nocloud_metadata_fields() -> None:
    vmi = new_vmi()
    vmi["metadata"]["annotations"] = {"kubevirt.io/instancetype-name": "u1.small"}
    assert ci.metadata(vmi, "noCloud") == {
        "instance-type": "u1.small",
        "instance-id": UUID,
        "local-hostname": "testvmi",
    }


def test_nocloud_metadata_json_is_go_marshal_output() -> None:
    vmi = new_vmi(name="fake")
    vmi["metadata"]["annotations"] = {"kubevirt.io/cluster-instancetype-name": "fake.fake-instancetype"}
    data = ci.cloud_init_data(vmi, "noCloud")
    expected = f'{{"instance-type":"fake.fake-instancetype","instance-id":"{UUID}","local-hostname":"fake"}}'
    assert ci.metadata_json(data) == expected.encode()


def test_cluster_instancetype_wins_over_namespaced() -> None:
    vmi = new_vmi()
    vmi["metadata"]["annotations"] = {
        "kubevirt.io/instancetype-name": "ns-type",
        "kubevirt.io/cluster-instancetype-name": "cluster-type",
    }
    assert ci.metadata(vmi, "noCloud")["instance-type"] == "cluster-type"
    assert ci.metadata(vmi, "configDrive")["instance_type"] == "cluster-type"


def test_no_instancetype_omits_the_field() -> None:
    assert "instance-type" not in ci.metadata(new_vmi(), "noCloud")
    assert "instance_type" not in ci.metadata(new_vmi(), "configDrive")


def test_configdrive_metadata_fields() -> None:
    vmi = new_vmi(name="fake", namespace="fake-namespace", source="cloudInitConfigDrive", userData="x")
    vmi["metadata"]["annotations"] = {"kubevirt.io/instancetype-name": "fake.fake-instancetype"}
    meta = ci.metadata(vmi, "configDrive")
    assert meta == {
        "instance_type": "fake.fake-instancetype",
        "instance_id": "fake.fake-namespace",
        "hostname": "fake",
        "uuid": UUID,
    }
    data = ci.cloud_init_data(vmi, "cloudInitConfigDrive")
    assert list(json.loads(ci.metadata_json(data))) == ["instance_type", "instance_id", "hostname", "uuid"]


def test_configdrive_devices_go_between_uuid_and_public_keys() -> None:
    vmi = new_vmi(source="cloudInitConfigDrive", userData="x")
    data = ci.cloud_init_data(vmi, "configDrive")
    data.metadata["public_keys"] = {"0": "ssh-ed25519 AAAA"}
    data.devices = [{"type": "nic", "bus": "pci", "address": "0000:01:00.0", "mac": "02:00:00:00:00:01", "tags": ["a"]}]
    decoded = json.loads(ci.metadata_json(data))
    assert list(decoded) == ["instance_id", "hostname", "uuid", "devices", "public_keys"]
    assert decoded["devices"][0]["tags"] == ["a"]


def test_devices_never_appear_in_nocloud_metadata() -> None:
    data = ci.cloud_init_data(new_vmi(), "noCloud")
    data.devices = [{"type": "nic", "bus": "pci", "address": "0000:01:00.0", "tags": ["a"]}]
    assert "devices" not in json.loads(ci.metadata_json(data))


@pytest.mark.parametrize(
    ("name", "spec_hostname", "expected"),
    [
        ("testvmi", None, "testvmi"),
        ("my.dotted.name", None, "my"),
        ("a" * 70, None, "a" * 63),
        (("b" * 70) + ".suffix", None, "b" * 63),
        ("testvmi", "custom-host", "custom-host"),
        ("a" * 70, "short", "short"),
    ],
)
def test_hostname_rules(name: str, spec_hostname: str | None, expected: str) -> None:
    vmi = new_vmi(name=name)
    if spec_hostname:
        vmi["spec"]["hostname"] = spec_hostname
    assert ci.metadata(vmi, "noCloud")["local-hostname"] == expected
    assert ci.metadata(vmi, "configDrive")["hostname"] == expected


def test_instance_id_is_random_without_firmware() -> None:
    vmi = new_vmi()
    del vmi["spec"]["domain"]["firmware"]
    first, second = ci.metadata(vmi, "noCloud")["instance-id"], ci.metadata(vmi, "noCloud")["instance-id"]
    assert len(first) == 36 and first != second


def test_public_keys_from_access_credentials() -> None:
    vmi = new_vmi()
    vmi["spec"]["accessCredentials"] = [
        {"sshPublicKey": {"source": {"secret": {"secretName": "keys"}}, "propagationMethod": {"noCloud": {}}}},
        {"sshPublicKey": {"source": {"secret": {"secretName": "agent"}}, "propagationMethod": {"qemuGuestAgent": {}}}},
    ]
    secrets = {"keys": {"b": b"ssh-rsa BBB", "a": b"ssh-ed25519 AAA", "empty": b"", "..data": b"x"}}
    assert ci.metadata(vmi, "noCloud", secrets)["public-keys"] == {"0": "ssh-ed25519 AAA", "1": "ssh-rsa BBB"}
    # The same credential is not propagated through ConfigDrive.
    assert "public_keys" not in ci.metadata(vmi, "configDrive", secrets)
    with pytest.raises(ValueError, match='secret "keys" of accessCredentials'):
        ci.metadata(vmi, "noCloud", {})


def test_go_json_escapes() -> None:
    data = ci.CloudInitData("noCloud", b"x", b"", {"instance-id": "a<b>&c", "local-hostname": "é"})
    assert ci.metadata_json(data) == '{"instance-id":"a\\u003cb\\u003e\\u0026c","local-hostname":"é"}'.encode()


def test_invalid_source_type() -> None:
    with pytest.raises(ValueError, match="invalid cloud-init data source"):
        ci.metadata(new_vmi(), "sysprep")


# ---- user and network data sources ----


def test_inline_user_and_network_data() -> None:
    data = ci.cloud_init_data(new_vmi(userData="#cloud-config\n", networkData="version: 2\n"), "noCloud")
    assert (data.source_type, data.volume_name) == ("noCloud", "cloudinit")
    assert data.user_data == b"#cloud-config\n" and data.network_data == b"version: 2\n"


def test_base64_user_and_network_data() -> None:
    encoded = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    vmi = new_vmi(userDataBase64=encoded, networkDataBase64=base64.b64encode(b"net").decode())
    data = ci.cloud_init_data(vmi, "noCloud")
    assert data.user_data == b"#!/bin/sh\necho hi\n" and data.network_data == b"net"


def test_base64_with_line_breaks_is_accepted() -> None:
    encoded = base64.encodebytes(b"#cloud-config\n" * 10).decode()
    assert "\n" in encoded.strip()
    assert ci.cloud_init_data(new_vmi(userDataBase64=encoded), "noCloud").user_data == b"#cloud-config\n" * 10


@pytest.mark.parametrize(("field", "value"), [("userDataBase64", "#### bad"), ("networkDataBase64", "abc")])
def test_bad_base64_is_a_clear_value_error(field: str, value: str) -> None:
    with pytest.raises(
        ValueError, match=rf'cloud-init volume "cloudinit": {field} is not valid base64: illegal base64'
    ):
        ci.cloud_init_data(new_vmi(**{field: value}), "noCloud")


def test_network_data_alone_is_enough() -> None:
    data = ci.cloud_init_data(new_vmi(networkData="version: 2\n"), "noCloud")
    assert data.user_data == b"" and data.network_data == b"version: 2\n"


def test_no_data_at_all_is_an_error() -> None:
    vmi = new_vmi(userData="")
    with pytest.raises(ValueError, match="userDataBase64, userData, networkDataBase64 or networkData is required"):
        ci.cloud_init_data(vmi, "noCloud")


@pytest.mark.parametrize("source", ["cloudInitNoCloud", "cloudInitConfigDrive"])
@pytest.mark.parametrize(("user_key", "network_key"), [("userdata", "networkdata"), ("userData", "networkData")])
def test_secret_refs(source: str, user_key: str, network_key: str) -> None:
    vmi = new_vmi(source=source, userDataSecretRef={"name": "udata"}, networkDataSecretRef={"name": "ndata"})
    secrets = {"udata": {user_key: b"secret-userdata"}, "ndata": {network_key: b"secret-networkdata"}}
    data = ci.cloud_init_data(vmi, source, secrets)
    assert data.user_data == b"secret-userdata" and data.network_data == b"secret-networkdata"


def test_secret_missing_keys_is_an_error() -> None:
    vmi = new_vmi(userDataSecretRef={"name": "udata"})
    with pytest.raises(
        ValueError, match=r'no cloud-init data-source found at volume: cloudinit \(secret "udata" has no'
    ):
        ci.cloud_init_data(vmi, "noCloud", {"udata": {"other": b"x"}})


def test_one_resolvable_secret_ref_is_enough() -> None:
    vmi = new_vmi(userDataSecretRef={"name": "udata"}, networkDataSecretRef={"name": "ndata"})
    data = ci.cloud_init_data(vmi, "noCloud", {"udata": {}, "ndata": {"networkData": b"net"}})
    assert data.user_data == b"" and data.network_data == b"net"


def test_missing_secret_is_an_error() -> None:
    vmi = new_vmi(userDataSecretRef={"name": "udata"})
    with pytest.raises(ValueError, match='secret "udata" referenced by cloud-init volume "cloudinit" was not found'):
        ci.cloud_init_data(vmi, "noCloud")


def test_missing_volume_is_an_error() -> None:
    with pytest.raises(ValueError, match="VMI has no cloudInitConfigDrive volume"):
        ci.cloud_init_data(new_vmi(), "configDrive")


# ---- ISOs ----


def test_nocloud_iso_contents(tmp_path: Path) -> None:
    vmi = new_vmi(userData="#cloud-config\nhostname: h\n", networkData="version: 2\n")
    data = ci.cloud_init_data(vmi, "noCloud")
    target = tmp_path / "ns" / "vm" / "noCloud.iso"
    ci.build_iso(data, target)
    assert target.stat().st_size % (1024 * 1024) == 0, "padded to whole cylinders, as xorrisofs does"
    label, by_rr, by_joliet, paths = read_iso(target)
    assert label == "cidata"
    assert paths == {"/", "/user-data", "/meta-data", "/network-config"}
    assert by_rr["/user-data"] == b"#cloud-config\nhostname: h\n"
    assert by_rr["/network-config"] == b"version: 2\n"
    assert json.loads(by_rr["/meta-data"]) == {"instance-id": UUID, "local-hostname": "testvmi"}
    assert by_joliet == by_rr
    assert sorted(p.name for p in target.parent.iterdir()) == ["noCloud.iso"], "staging file must be renamed away"


def test_configdrive_iso_contents(tmp_path: Path) -> None:
    vmi = new_vmi(source="cloudInitConfigDrive", userData="#!/bin/sh\necho hi\n", networkData='{"links":[]}')
    data = ci.cloud_init_data(vmi, "configDrive")
    target = tmp_path / "configdrive.iso"
    ci.build_iso(data, target)
    label, by_rr, by_joliet, paths = read_iso(target)
    assert label == "config-2"
    assert paths == {
        "/",
        "/openstack",
        "/openstack/latest",
        "/openstack/latest/user_data",
        "/openstack/latest/meta_data.json",
        "/openstack/latest/network_data.json",
    }
    assert by_rr["/openstack/latest/user_data"] == b"#!/bin/sh\necho hi\n"
    assert by_rr["/openstack/latest/network_data.json"] == b'{"links":[]}'
    assert json.loads(by_rr["/openstack/latest/meta_data.json"])["instance_id"] == "testvmi.testns"
    assert by_joliet == by_rr


def test_iso_without_network_data_has_no_network_file_but_always_user_data(tmp_path: Path) -> None:
    data = ci.cloud_init_data(new_vmi(networkData="version: 2\n"), "noCloud")
    data.network_data = b""
    data.user_data = b"x"
    ci.build_iso(data, tmp_path / "a.iso")
    assert read_iso(tmp_path / "a.iso")[3] == {"/", "/user-data", "/meta-data"}
    data = ci.cloud_init_data(new_vmi(networkData="version: 2\n"), "noCloud")
    ci.build_iso(data, tmp_path / "b.iso")
    _label, by_rr, _joliet, _paths = read_iso(tmp_path / "b.iso")
    assert by_rr["/user-data"] == b""


def test_build_iso_replaces_an_existing_iso_and_stale_staging(tmp_path: Path) -> None:
    target = tmp_path / "noCloud.iso"
    target.write_bytes(b"old")
    (tmp_path / "noCloud.iso.staging").write_bytes(b"stale")
    ci.build_iso(ci.cloud_init_data(new_vmi(userData="new"), "noCloud"), target)
    ci.build_iso(ci.cloud_init_data(new_vmi(userData="newer"), "noCloud"), target)
    assert read_iso(target)[1]["/user-data"] == b"newer"
    assert not (tmp_path / "noCloud.iso.staging").exists()


def test_build_iso_requires_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="UserData or NetworkData is required"):
        ci.build_iso(ci.CloudInitData("noCloud", b"", b"", {"instance-id": "x"}), tmp_path / "x.iso")
    assert list(tmp_path.iterdir()) == []


def test_binary_user_data_survives(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3
    vmi = new_vmi(userDataBase64=base64.b64encode(payload).decode())
    ci.build_iso(ci.cloud_init_data(vmi, "noCloud"), tmp_path / "x.iso")
    assert read_iso(tmp_path / "x.iso")[1]["/user-data"] == payload
