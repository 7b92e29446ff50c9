"""The API server's own CPU cost of one VM start's writes, without HTTP, watches or other processes.

One VM start is the writes virt-controller, the scheduler, the kubelet and virt-handler make for it (the figures of
`bench.control_plane`): the VM, its revision, VMI and launcher pod, their status moves, the binding and two events,
each made through the API server's object layer (decoding, admission, schema, managedFields, SQLite) with the bodies
those components send. On a 2-core machine shared with other tenants the end-to-end bench varies by ±15 % from one
run to the next; this one runs on one core, in one process, and keeps the fastest of `--repeats` rounds, so two
versions of the code can be compared to a few per cent (`PYTHONPATH=<checkout>/src:<checkout>`, one after another).

    .venv/bin/python -m bench.apiserver_write_path --starts 200 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.control_plane import vm_manifest

from bench.arguments import at_least
from bench.harness import log, machine
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.patching import JSON_PATCH, MERGE_PATCH
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.server import EmbeddedAPIServer, ServerOptions
from pykubevirt.cli.apiserver_command import extensions
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.controller.vmi_from_vm import vmi_from_vm
from pykubevirt.virtapi.identities import CONTROLLER_USER, HANDLER_USER

NAMESPACE = "bench"
NOW = "2026-12-01T00:00:00Z"


def _user(name: str) -> RequestContext:
    groups = ("system:serviceaccounts", "system:authenticated") if name.startswith("system:serviceaccount:") else ()
    return RequestContext(user=UserInfo(name, groups), user_agent=name.rsplit(":", 1)[-1])


class OneStart:
    """The writes of one VM start, in the order the components make them."""

    def __init__(self, api: ObjectAPI, registry: Registry) -> None:
        self.api = api
        self.config = ClusterConfig()
        self.settings = LauncherSettings()
        self.admin = RequestContext(user=UserInfo("kubernetes-admin", ("system:masters",)), user_agent="kubectl")
        self.controller = _user(CONTROLLER_USER)
        self.handler = _user(HANDLER_USER)
        self.kubelet = RequestContext(user=UserInfo("system:node:node01", ("system:nodes",)), user_agent="kubelet")

        def resource(group: str, plural: str) -> Resource:
            found = registry.get(group, "v1", plural)
            assert found is not None, plural
            return found

        self.vms = resource("kubevirt.io", "virtualmachines")
        self.vmis = resource("kubevirt.io", "virtualmachineinstances")
        self.pods = resource("", "pods")
        self.events = resource("", "events")
        self.revisions = resource("apps", "controllerrevisions")

    def _put(self, resource: Resource, obj: dict[str, Any], ctx: RequestContext, sub: str, **status: Any) -> Any:
        """A PUT of `obj` with `status` merged in: the VM's status subresource, or the whole VMI (it has none)."""
        new = copy_json(obj)
        new["status"] = {**(new.get("status") or {}), **status}
        return self.api.update(resource, NAMESPACE, new["metadata"]["name"], new, ctx, subresource=sub, owned=True)

    def _patch(self, resource: Resource, name: str, patch: Any, ctx: RequestContext, kind: str, sub: str = "") -> Any:
        body = json.dumps(patch).encode()
        return self.api.patch(resource, NAMESPACE, name, body, kind, ctx, subresource=sub)[0]

    def _event(self, involved: dict[str, Any], reason: str) -> None:
        meta = involved["metadata"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{reason.lower()}", "namespace": NAMESPACE},
            "involvedObject": {"kind": involved["kind"], "name": meta["name"], "uid": meta["uid"]},
            "reason": reason,
            "message": f"Created {meta['name']}",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": NOW,
            "lastTimestamp": NOW,
            "source": {"component": "virtualmachine-controller"},
        }
        self.api.create(self.events, NAMESPACE, event, self.controller, owned=True)

    def run(self, name: str) -> None:
        vm = self.api.create(self.vms, NAMESPACE, vm_manifest(name), self.admin)
        revision = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": f"revision-start-vm-{vm['metadata']['uid']}-1", "namespace": NAMESPACE},
            "data": {"spec": vm["spec"]},
            "revision": 1,
        }
        self.api.create(self.revisions, NAMESPACE, revision, self.controller, owned=True)
        vmi = self.api.create(self.vmis, NAMESPACE, vmi_from_vm(vm, self.config), self.controller, owned=True)
        self._event(vmi, "SuccessfulCreate")
        vm = self._put(self.vms, vm, self.controller, "status", printableStatus="Starting", created=True)
        pod = render_launcher_pod(vmi, self.settings)
        pod["metadata"]["name"] = f"virt-launcher-{name}-abcde"
        pod = self.api.create(self.pods, NAMESPACE, pod, self.controller, owned=True)
        self._event(pod, "SuccessfulCreate")
        vmi = self._put(self.vmis, vmi, self.controller, "", phase="Scheduling")
        pod = self.api.update(
            self.pods,
            NAMESPACE,
            pod["metadata"]["name"],
            {**copy_json(pod), "spec": {**pod["spec"], "nodeName": "node01"}},
            self.admin,
            owned=True,
        )
        running = {
            "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
            "status": {
                "phase": "Running",
                "podIP": "10.244.0.10",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": NOW}],
                "containerStatuses": [
                    {"name": "compute", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": NOW}}}
                ],
            },
        }
        pod = self._patch(self.pods, pod["metadata"]["name"], running, self.kubelet, MERGE_PATCH, "status")
        vmi = self._put(self.vmis, vmi, self.controller, "", phase="Scheduled", nodeName="node01")
        gate = {"type": "kubevirt.io/virtual-machine-unpaused", "status": "True", "lastTransitionTime": NOW}
        pod = self._patch(
            self.pods,
            pod["metadata"]["name"],
            [{"op": "add", "path": "/status/conditions/-", "value": gate}],
            self.controller,
            JSON_PATCH,
            "status",
        )
        handler_patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": vmi["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/status", "value": {**vmi["status"], "phase": "Running"}},
        ]
        vmi = self._patch(self.vmis, name, handler_patch, self.handler, JSON_PATCH)
        ready = [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}]
        vmi = self._patch(
            self.vmis, name, [{"op": "add", "path": "/status/conditions", "value": ready}], self.controller, JSON_PATCH
        )
        self._put(self.vms, vm, self.controller, "status", printableStatus="Running", ready=True)


async def measure(starts: int, repeats: int) -> dict[str, Any]:
    rounds = []
    for repeat in range(repeats):
        with tempfile.TemporaryDirectory(prefix="pykubevirt-bench-") as tmp:
            options = ServerOptions(data_dir=Path(tmp) / "data", port=0, fsync=False)
            server = EmbeddedAPIServer(options, extensions=extensions(ClusterConfig(), plain=False))
            await server.start()
            try:
                namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
                server.api.create(server.registry.get("", "v1", "namespaces"), None, namespace, RequestContext())
                flow = OneStart(server.api, server.registry)
                flow.run("warm-up")
                gc.collect()
                began = time.process_time()
                for i in range(starts):
                    flow.run(f"vm-{i:05d}")
                    if i % 20 == 19:
                        # The writes' group commits run at the event loop's next turn, as in the server.
                        await asyncio.sleep(0)
                rounds.append(time.process_time() - began)
            finally:
                await server.stop()
        log(f"round {repeat + 1}: {1000 * rounds[-1] / starts:.2f} ms a start")
    return {
        "bench": "apiserver_write_path",
        "machine": machine(),
        "starts": starts,
        "repeats": repeats,
        "ms_per_start_best": round(1000 * min(rounds) / starts, 3),
        "ms_per_start_rounds": [round(1000 * r / starts, 3) for r in rounds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=at_least(1), default=200)
    parser.add_argument("--repeats", type=at_least(1), default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.starts, args.repeats))), flush=True)


if __name__ == "__main__":
    main()
