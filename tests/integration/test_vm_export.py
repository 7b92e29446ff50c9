"""VirtualMachineExport end to end without a guest: a real API server process (with its export proxy), the export
controller as virt-controller's identity, the embedded storage and a real node agent running the exporter pod's
`virt-exportserver`; downloads go through the external link with the export's token."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import os
import ssl
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pykubevirt.api.quantity import MI
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import (
    DATA_VOLUMES,
    EVENTS,
    INSTANCETYPES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    SECRETS,
    SERVICES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    VM_EXPORTS,
    ResourceRef,
)
from pykubevirt.controller.app import VM_CLAIM_INDEX, VMI_CLAIM_INDEX, _claims_of_vm, _claims_of_vmi
from pykubevirt.controller.vm_export_controller import ExternalLinks, export_controller
from tests.support.control_plane import client_for
from tests.support.storage_plane import Env, pattern, storage_env, volume_dir
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN_HEADER = "x-kubevirt-export-token"
VIRTCTL = str(Path(sys.executable).parent / "virtctl")


@dataclass
class ExportEnv:
    env: Env
    admin: KubeClient
    ca: str


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def exports(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ExportEnv]:
    async with storage_env(tmp_path_factory.mktemp("vm-export"), "export-node") as env:
        client = client_for(env.server, "virt-controller")
        pvcs, vms = Informer(client, PERSISTENT_VOLUME_CLAIMS), Informer(client, VIRTUAL_MACHINES)
        vmis, dvs = Informer(client, VIRTUAL_MACHINE_INSTANCES), Informer(client, DATA_VOLUMES)
        vms.add_indexer(VM_CLAIM_INDEX, _claims_of_vm)
        vmis.add_indexer(VMI_CLAIM_INDEX, _claims_of_vmi)
        ca = client.config.ca_data.decode()
        host = client.config.server.split("://", 1)[1]
        informers, controllers = await export_controller(
            client, pvcs=pvcs, vms=vms, vmis=vmis, data_volumes=dvs, external=ExternalLinks(host, ca)
        )
        assert controllers, "the API server serves export.kubevirt.io"
        tasks = [asyncio.create_task(i.run()) for i in [pvcs, vms, vmis, dvs, *informers]]
        tasks += [asyncio.create_task(c.run()) for c in controllers]
        try:
            yield ExportEnv(env, env.admin, ca)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()


def claim(name: str, **annotations: str) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }


def vm_export(name: str, kind: str, source: str, **spec: Any) -> Object:
    group = {"VirtualMachine": "kubevirt.io"}.get(kind)
    return {
        "apiVersion": "export.kubevirt.io/v1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": name},
        "spec": {"source": {"kind": kind, "name": source, **({"apiGroup": group} if group else {})}, **spec},
    }


async def ready(admin: KubeClient, ns: str, name: str) -> Object:
    async def check() -> Object | None:
        current = await admin.get(VM_EXPORTS, name, ns)
        return current if (current.get("status") or {}).get("phase") == "Ready" else None

    return await eventually(check, timeout=60)


async def token_of(admin: KubeClient, ns: str, export: Object) -> str:
    secret = await admin.get(SECRETS, export["status"]["tokenSecretRef"], ns)
    return base64.b64decode(secret["data"]["token"]).decode()


async def fetch(url: str, ca: str, token: str | None = None, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    context = ssl.create_default_context(cadata=ca)
    if token is not None:
        headers[TOKEN_HEADER] = token
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(url, headers=headers, ssl=context) as response:
            return response.status, await response.read(), dict(response.headers)


async def gone(admin: KubeClient, resource: ResourceRef, name: str, ns: str) -> bool:
    try:
        await admin.get(resource, name, ns)
    except NotFound:
        return True
    return False


def formats(export: Object, volume: str) -> dict[str, str]:
    (entry,) = [v for v in export["status"]["links"]["external"]["volumes"] if v["name"] == volume]
    return {f["format"]: f["url"] for f in entry["formats"]}


async def fill(admin: KubeClient, ns: str, claim_name: str, files: dict[str, bytes]) -> None:
    """Write files into a bound claim's volume, as a pod that used it would have."""
    directory = await volume_dir(admin, ns, claim_name)
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)


async def test_a_claim_with_a_disk_image_is_served_raw_and_gzipped_through_the_external_link(
    exports: ExportEnv,
) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(
        PERSISTENT_VOLUME_CLAIMS, claim("disk", **{"cdi.kubevirt.io/storage.contentType": "kubevirt"}), ns
    )
    await admin.create(VM_EXPORTS, vm_export("exp", "PersistentVolumeClaim", "disk"), ns)
    export = await ready(admin, ns, "exp")
    # The exporter pod was the WaitForFirstConsumer claim's first consumer: it is bound now, and empty.
    image = pattern(3 * MI)
    await fill(admin, ns, "disk", {"disk.img": image})
    status = export["status"]
    assert status["serviceName"] == "virt-export-exp" and status["tokenSecretRef"] == "export-token-exp"
    assert {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]} == {
        "Ready": ("True", "PodReady"),
        "PVCReady": ("True", "PVCBound"),
    }
    assert status["links"]["external"]["cert"] == exports.ca
    urls = formats(export, "disk")
    assert sorted(urls) == ["gzip", "raw"]
    token = await token_of(admin, ns, export)
    code, body, headers = await fetch(urls["raw"], exports.ca, token)
    assert (code, len(body), headers["Content-Length"]) == (200, len(image), str(len(image)))
    assert body == image
    code, body, _ = await fetch(urls["gzip"], exports.ca, token)
    assert code == 200 and gzip.decompress(body) == image
    # The token by query works as KubeVirt's; a missing or wrong one is refused by the server, through the proxy.
    code, body, _ = await fetch(f"{urls['raw']}?x-kubevirt-export-token={token}", exports.ca)
    assert code == 200 and body == image
    assert (await fetch(urls["raw"], exports.ca))[0] == 401
    assert (await fetch(urls["raw"], exports.ca, "wrong"))[0] == 401
    service = await admin.get(SERVICES, "virt-export-exp", ns)
    assert service["spec"]["selector"] == {"kubevirt.io.virt-export-service": "exp"}
    reasons = {e["reason"] for e in (await admin.list(EVENTS, ns))["items"] if e["involvedObject"]["name"] == "exp"}
    assert {"ServiceCreated", "SecretCreated", "ExporterPodCreated"} <= reasons


async def test_a_claim_of_other_content_is_served_as_a_directory_and_a_tarball(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("files"), ns)
    await admin.create(VM_EXPORTS, vm_export("files-exp", "PersistentVolumeClaim", "files"), ns)
    export = await ready(admin, ns, "files-exp")
    await fill(admin, ns, "files", {"a.txt": b"alpha\n", "b.bin": pattern(MI)})
    urls = formats(export, "files")
    assert sorted(urls) == ["dir", "tar.gz"]
    token = await token_of(admin, ns, export)
    code, body, _ = await fetch(urls["dir"] + "a.txt", exports.ca, token)
    assert (code, body) == (200, b"alpha\n")
    code, body, _ = await fetch(urls["tar.gz"], exports.ca, token)
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
        assert set(members) >= {"a.txt", "b.bin"}
        extracted = tar.extractfile(members["b.bin"])
        assert extracted is not None and extracted.read() == pattern(MI)


async def test_the_proxy_answers_404_for_no_export_and_503_until_it_is_ready(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    base = f"{exports.env.server.url}/api/export.kubevirt.io/v1/namespaces/{ns}/virtualmachineexports"
    assert (await fetch(f"{base}/none/volumes/x/disk.img", exports.ca))[0] == 404
    assert (await fetch(f"{exports.env.server.url}/api/export.kubevirt.io/v1/bad", exports.ca))[0] == 400
    # A claim that does not exist yet: the export waits, Pending, and says why.
    await admin.create(VM_EXPORTS, vm_export("early", "PersistentVolumeClaim", "later"), ns)

    async def waiting() -> Object | None:
        current = await admin.get(VM_EXPORTS, "early", ns)
        conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        return current if "PVCReady" in conditions else None

    export = await eventually(waiting, timeout=30)
    assert export["status"]["phase"] == "Pending"
    conditions = {c["type"]: c for c in export["status"]["conditions"]}
    assert (conditions["PVCReady"]["reason"], conditions["PVCReady"]["message"]) == (
        "PVCNotFound",
        f"PersistentVolumeClaim {ns}/later not found",
    )
    assert export["status"]["ttlExpirationTime"]
    assert (await fetch(f"{base}/early/volumes/later/disk.img", exports.ca))[0] == 503
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("later"), ns)
    await ready(admin, ns, "early")


async def test_an_export_past_its_ttl_is_deleted_with_its_pod(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("brief"), ns)
    await admin.create(VM_EXPORTS, vm_export("brief", "PersistentVolumeClaim", "brief", ttlDuration="8s"), ns)
    await ready(admin, ns, "brief")

    await eventually(lambda: gone(admin, VM_EXPORTS, "brief", ns), timeout=30)


async def test_a_vm_export_waits_for_the_vm_and_serves_its_claims_and_manifest(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(VM_EXPORTS, vm_export("vmexp", "VirtualMachine", "vm"), ns)

    async def not_found() -> Object | None:
        current = await admin.get(VM_EXPORTS, "vmexp", ns)
        conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        ready_condition = conditions.get("Ready") or {}
        return current if ready_condition.get("reason") == "VMNotFound" else None

    export = await eventually(not_found, timeout=30)
    # Nothing to serve: KubeVirt skips it until the VM and its claims are there.
    assert (export["status"]["phase"], export["status"]["virtualMachineName"]) == ("Skipped", "vm")
    assert {c["type"]: c for c in export["status"]["conditions"]}["Ready"]["message"] == (
        f"Virtual Machine {ns}/vm not found"
    )
    await admin.create(
        PERSISTENT_VOLUME_CLAIMS, claim("root", **{"cdi.kubevirt.io/storage.contentType": "kubevirt"}), ns
    )
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm", "labels": {"app": "demo"}},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                    "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}],
                }
            },
        },
    }
    await admin.create(VIRTUAL_MACHINES, vm, ns)
    export = await ready(admin, ns, "vmexp")
    assert sorted(formats(export, "root")) == ["gzip", "raw"]
    manifests = {m["type"]: m["url"] for m in export["status"]["links"]["external"]["manifests"]}
    assert sorted(manifests) == ["all", "auth-header-secret"]
    token = await token_of(admin, ns, export)
    code, body, _ = await fetch(manifests["all"], exports.ca, token, Accept="application/json")
    assert code == 200
    listed = json.loads(body)
    kinds = [item["kind"] for item in listed["items"]]
    assert "VirtualMachine" in kinds
    (vm_item,) = [i for i in listed["items"] if i["kind"] == "VirtualMachine"]
    assert vm_item["metadata"]["name"] == "vm" and "status" not in vm_item
    # A VMI of the VM starting takes its claim back: the exporter pod goes, and the export waits, saying why.
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm"},
        "spec": {**vm["spec"]["template"]["spec"], "domain": {**vm["spec"]["template"]["spec"]["domain"]}},
    }
    vmi["spec"]["domain"]["resources"] = {"requests": {"memory": "64Mi"}}
    await admin.create(VIRTUAL_MACHINE_INSTANCES, vmi, ns)

    async def paused() -> Object | None:
        current = await admin.get(VM_EXPORTS, "vmexp", ns)
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        return current if conditions["Ready"].get("reason") == "InUse" else None

    export = await eventually(paused, timeout=30)
    assert export["status"]["phase"] == "Pending" and "external" not in export["status"]["links"]
    assert {c["type"]: c for c in export["status"]["conditions"]}["Ready"]["message"] == (
        f"Virtual Machine {ns}/vm is running"
    )

    await eventually(lambda: gone(admin, PODS, "virt-export-vmexp", ns), timeout=30)
    events = [(e["type"], e["reason"]) for e in (await admin.list(EVENTS, ns))["items"]]
    assert ("Warning", "ExportPaused") in events


async def test_a_vm_export_serves_the_vms_firmware_state_claim_but_names_only_its_disks_in_the_manifest(
    exports: ExportEnv,
) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("disk"), ns)
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "fw"},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}},
                        "devices": {"disks": [{"name": "disk", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": "disk"}}],
                }
            },
        },
    }
    vm = await admin.create(VIRTUAL_MACHINES, vm, ns)
    await admin.create(VM_EXPORTS, vm_export("fwexp", "VirtualMachine", "fw"), ns)

    # Never started, so without its state claim: as upstream, the export lists no volume until the claim exists.
    async def no_volumes() -> Object | None:
        current = await admin.get(VM_EXPORTS, "fwexp", ns)
        conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        return current if (conditions.get("Ready") or {}).get("reason") == "VMNoVolumes" else None

    await eventually(no_volumes, timeout=30)
    state = claim("persistent-state-for-fw-q2x9z")
    state["metadata"]["labels"] = {"persistent-state-for": "fw"}
    state["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "fw", "uid": vm["metadata"]["uid"]}
    ]
    await admin.create(PERSISTENT_VOLUME_CLAIMS, state, ns)
    export = await ready(admin, ns, "fwexp")
    await fill(admin, ns, "persistent-state-for-fw-q2x9z", {"nvram/fw_VARS.fd": b"firmware variables"})
    volumes = {v["name"] for v in export["status"]["links"]["external"]["volumes"]}
    assert volumes == {"disk", "persistent-state-for-fw-q2x9z"}
    token = await token_of(admin, ns, export)
    tar_url = formats(export, "persistent-state-for-fw-q2x9z")["tar.gz"]
    code, body, _ = await fetch(tar_url, exports.ca, token)
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        files = {m.name: archive.extractfile(m) for m in archive.getmembers() if m.isfile()}
        assert files["./nvram/fw_VARS.fd"].read() == b"firmware variables"  # type: ignore[union-attr]
    code, body, _ = await fetch(
        {m["type"]: m["url"] for m in export["status"]["links"]["external"]["manifests"]}["all"],
        exports.ca,
        token,
        Accept="application/json",
    )
    data_volumes = [i["metadata"]["name"] for i in json.loads(body)["items"] if i["kind"] == "DataVolume"]
    assert data_volumes == ["disk"]


def virtctl(exports: ExportEnv, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(exports.env.server.kubeconfig)}
    return subprocess.run(
        [VIRTCTL, *argv], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=exports.env.root
    )


async def test_virtctl_downloads_a_claim_through_an_export_it_makes_and_deletes(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("vd", **{"cdi.kubevirt.io/storage.contentType": "kubevirt"}), ns)
    # Bind it and fill it first: an export of it makes its pod the claim's first consumer.
    await admin.create(VM_EXPORTS, vm_export("fill", "PersistentVolumeClaim", "vd"), ns)
    await ready(admin, ns, "fill")
    image = pattern(2 * MI)
    await fill(admin, ns, "vd", {"disk.img": image})
    await admin.delete(VM_EXPORTS, "fill", ns)
    output = exports.env.root / f"{ns}.img"
    done = await asyncio.to_thread(
        virtctl, exports, "vmexport", "download", "vd-exp", "-n", ns, "--pvc=vd", f"--output={output}", "--format=raw"
    )
    assert done.returncode == 0, done.stderr
    assert f"VirtualMachineExport '{ns}/vd-exp' created successfully" in done.stdout
    assert "Download finished successfully" in done.stdout
    assert f"VirtualMachineExport '{ns}/vd-exp' deleted successfully" in done.stdout
    assert output.read_bytes() == image
    with pytest.raises(NotFound):
        await admin.get(VM_EXPORTS, "vd-exp", ns)
    # As KubeVirt's: an export that does not exist is waited for, up to --readiness-timeout.
    waited = await asyncio.to_thread(
        virtctl, exports, "vmexport", "download", "none", "-n", ns, "--output=x", "--readiness-timeout=2s"
    )
    assert waited.returncode == 1 and waited.stderr.strip().endswith("context deadline exceeded")
    assert "couldn't get VM Export none, waiting for it to be created..." in waited.stdout


async def test_a_vm_exports_manifest_has_its_instancetype_expanded(exports: ExportEnv) -> None:
    """As KubeVirt's: the manifest stands without the instancetype, which the importing cluster may not have."""
    admin, ns = exports.admin, await exports.env.namespace()
    small = {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineInstancetype",
        "metadata": {"name": "small"},
        "spec": {"cpu": {"guest": 1}, "memory": {"guest": "96Mi"}},
    }
    await admin.create(INSTANCETYPES, small, ns)
    await admin.create(
        PERSISTENT_VOLUME_CLAIMS, claim("typed-root", **{"cdi.kubevirt.io/storage.contentType": "kubevirt"}), ns
    )
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "typed"},
        "spec": {
            "runStrategy": "Halted",
            "instancetype": {"kind": "VirtualMachineInstancetype", "name": "small"},
            "template": {
                "spec": {
                    "domain": {"devices": {}},
                    "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "typed-root"}}],
                }
            },
        },
    }
    await admin.create(VIRTUAL_MACHINES, vm, ns)
    await admin.create(VM_EXPORTS, vm_export("typed-exp", "VirtualMachine", "typed"), ns)
    export = await ready(admin, ns, "typed-exp")
    manifests = {m["type"]: m["url"] for m in export["status"]["links"]["external"]["manifests"]}
    token = await token_of(admin, ns, export)
    code, body, _ = await fetch(manifests["all"], exports.ca, token, Accept="application/json")
    assert code == 200
    (exported,) = [i for i in json.loads(body)["items"] if i["kind"] == "VirtualMachine"]
    assert "instancetype" not in exported["spec"]
    domain = exported["spec"]["template"]["spec"]["domain"]
    assert (domain["memory"]["guest"], domain["cpu"]["sockets"]) == ("96Mi", 1)


async def test_a_download_cut_short_by_the_exporter_ends_in_an_error_not_a_short_file(exports: ExportEnv) -> None:
    admin, ns = exports.admin, await exports.env.namespace()
    await admin.create(
        PERSISTENT_VOLUME_CLAIMS, claim("big", **{"cdi.kubevirt.io/storage.contentType": "kubevirt"}), ns
    )
    await admin.create(VM_EXPORTS, vm_export("cut", "PersistentVolumeClaim", "big"), ns)
    export = await ready(admin, ns, "cut")
    await fill(admin, ns, "big", {"disk.img": pattern(48 * MI)})
    token = await token_of(admin, ns, export)
    context = ssl.create_default_context(cadata=exports.ca)
    received = 0
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(formats(export, "big")["raw"], headers={TOKEN_HEADER: token}, ssl=context) as answer:
            assert answer.status == 200 and answer.headers["Content-Length"] == str(48 * MI)
            received += len(await answer.content.readexactly(MI))
            # The exporter goes while the rest is on its way (its writes wait for this reader); the controller
            # makes a new one, which this download does not reach.
            first = (await admin.get(PODS, "virt-export-cut", ns))["metadata"]["uid"]
            await admin.delete(PODS, "virt-export-cut", ns)

            async def replaced() -> bool:
                try:
                    return (await admin.get(PODS, "virt-export-cut", ns))["metadata"]["uid"] != first
                except NotFound:
                    return True

            await eventually(replaced, timeout=30)
            with pytest.raises(aiohttp.ClientPayloadError):
                while chunk := await answer.content.read(MI):
                    received += len(chunk)
    assert received < 48 * MI
