"""`virtctl memory-dump` against the embedded API server, with virt-controller and a simulated node running the VM:
the claim `--create-claim` makes, the memorydump and removememorydump PUTs reaching virt-api (its answers printed as
virtctl's one-line errors), and `download` exporting the claim of a completed dump."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, SECRETS, VIRTUAL_MACHINES, VM_EXPORTS, ResourceRef
from tests.integration.test_subresources import VIRTCTL, virtctl, virtctl_env
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import start_control_plane, vm_manifest
from tests.support.waiting import eventually

OVERHEAD_LINE = "Using default 5.5% filesystem overhead for pvc size\n"


async def test_memory_dump_claim_request_and_download(fresh_apiserver: APIServerProcess, tmp_path: Path) -> None:
    cp = await start_control_plane(fresh_apiserver)
    try:
        ns = await cp.namespace()
        vm = vm_manifest("dumped")
        # The dump's size comes from the VMI's memory request, which memory.guest alone does not set.
        vm["spec"]["template"]["spec"]["domain"]["resources"] = {"requests": {"memory": "128Mi"}}
        await cp.admin.create(VIRTUAL_MACHINES, vm, ns)
        await cp.wait_printable(ns, "dumped", "Running")
        vmi = await cp.vmi(ns, "dumped")
        assert vmi is not None and vmi["spec"]["domain"]["resources"]["requests"]["memory"] == "128Mi"
        run = lambda *args: virtctl(fresh_apiserver, tmp_path, "-n", ns, "memory-dump", *args)  # noqa: E731

        assert await run("get") == (1, "", "accepts 2 arg(s), received 1\n")
        assert await run("dump", "dumped") == (1, "", "invalid action type dump\n")
        assert await run("get", "dumped", "--create-claim") == (1, "", "missing claim name\n")
        code, out, err = await run("get", "dumped", "--claim-name=dump", "--create-claim", "--access-mode=ReadOnlyMany")
        assert (code, out) == (1, OVERHEAD_LINE)
        assert err == "cannot dump memory to a readonly pvc, use either ReadWriteOnce or ReadWriteMany if supported\n"

        taken = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "taken"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, taken, ns)
        exists = f"PVC {ns}/taken already exists, check if it should be created if not remove create flag\n"
        assert await run("get", "dumped", "--claim-name=taken", "--create-claim") == (1, "", exists)

        # 128Mi of memory + 100Mi, + 5.5 % (no CDIConfig here), rounded up to a MiB: 240.5 → 241Mi.
        assert await run("get", "--create-claim", "dumped", "--claim-name=dump") == (
            0,
            f"{OVERHEAD_LINE}PVC {ns}/dump created\nSuccessfully submitted memory dump request of VM dumped\n",
            "",
        )
        claim = await cp.admin.get(PERSISTENT_VOLUME_CLAIMS, "dump", ns)
        assert claim["metadata"]["labels"] == {"cdi.kubevirt.io/applyStorageProfile": "true"}
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "241Mi"
        vm = await cp.vm(ns, "dumped")
        assert vm is not None and vm["status"]["memoryDumpRequest"]["claimName"] == "dump"

        # The association stands: no new claim, and virt-api refuses another one.
        associated = "please remove current memory dump association before creating a new claim for a new memory dump"
        assert await run("get", "dumped", "--claim-name=other", "--create-claim") == (1, "", f"{associated}\n")
        code, out, err = await run("get", "dumped", "--claim-name=taken")
        assert (code, out, err.count("\n")) == (1, "", 1)
        assert err.startswith("error dumping vm memory, ")
        assert "can't request memory dump for pvc [taken] while pvc [dump] is still associated" in err
        code, _, err = await run("get", "missing", "--claim-name=dump")
        assert code == 1 and err.startswith("error dumping vm memory, ") and "not found" in err

        removed = (0, "Successfully submitted remove memory dump association of VM dumped\n", "")
        assert await run("remove", "dumped") == removed
        code, _, err = await run("remove", "missing")
        assert code == 1 and err.startswith("error removing memory dump association, ") and "not found" in err
        assert await run("download", "dumped") == (1, "", "missing outputFile to download the memory dump\n")
    finally:
        await cp.stop()


async def test_download_of_a_completed_dump_exports_its_claim(
    fresh_apiserver: APIServerProcess, tmp_path: Path
) -> None:
    """The download goes through a VirtualMachineExport of the claim, `export-<vm>-<claim>`, which virtctl makes with
    its token Secret and then waits for (this control plane runs no export controller: tests/integration/test_vm_export
    and the e2e memory dump follow a download to its end)."""
    cp = await start_control_plane(fresh_apiserver)
    try:
        ns = await cp.namespace()
        await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("done", "Halted"), ns)
        await cp.wait_printable(ns, "done", "Stopped")
        # A dump that completed earlier, as virt-controller leaves it in the VM's status (and keeps it there).
        done = {"claimName": "dump", "phase": "Completed", "fileName": "done-dump-20250101-000000.memory.dump"}
        patch = {"status": {"memoryDumpRequest": done}}
        await cp.admin.patch(VIRTUAL_MACHINES, "done", patch, ns, subresource="status")
        process = await asyncio.create_subprocess_exec(
            VIRTCTL,
            "-n",
            ns,
            "memory-dump",
            "download",
            "done",
            "--output",
            str(tmp_path / "o.gz"),
            env=virtctl_env(fresh_apiserver, tmp_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            export = await eventually(lambda: _get(cp.admin, VM_EXPORTS, "export-done-dump", ns), timeout=30)
        finally:
            process.kill()
            await process.wait()
        assert export["spec"]["source"] == {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "dump"}
        secret = await cp.admin.get(SECRETS, export["spec"]["tokenSecretRef"], ns)
        assert secret["data"]["token"]
        assert secret["metadata"]["ownerReferences"][0]["name"] == "export-done-dump"
    finally:
        await cp.stop()


async def _get(admin: KubeClient, resource: ResourceRef, name: str, ns: str) -> Object | None:
    try:
        return await admin.get(resource, name, ns)
    except NotFound:
        return None
