"""The subresource API's request handling: route, read the VM/VMI, decide, write or proxy to virt-handler.

The same object serves the embedded API server (in-process) and `pykubevirt virt-api` (aggregated APIService).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.apiserver.http_api import error_response, json_response
from pykubevirt.client.api import JSON_PATCH, KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import (
    MIGRATIONS,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from pykubevirt.client.streams import (
    STREAM_PROTOCOL,
    pump_websockets,
)
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi import discovery, memory_dump, object_graph
from pykubevirt.virtapi.evacuate_cancel import cancel_patch, drain_taint_refusal, evacuation_node
from pykubevirt.virtapi.expand import ExpandError, expand_vm, find_spec, vm_from_body
from pykubevirt.virtapi.handler_client import HandlerClient
from pykubevirt.virtapi.lifecycle import (
    VM_RESOURCE,
    VMI_RESOURCE,
    Plan,
    check_restart_options,
    decide_restart,
    decide_start,
    decide_stop,
    vm_conflict,
    vmi_conflict,
)
from pykubevirt.virtapi.migrate import migration_for, parse_migrate_options
from pykubevirt.virtapi.options import is_dry_run, parse_evacuate_cancel, parse_pause, parse_restart, parse_stop
from pykubevirt.virtapi.portforward import NOT_WEBSOCKET, check_port_forward, forward, parse_target
from pykubevirt.virtapi.vmi_checks import (
    check_console,
    check_freeze,
    check_guest_agent,
    check_handler_reachable,
    check_pause,
    check_soft_reboot,
    check_unfreeze,
    check_unpause,
    check_unpause_vm,
    check_usbredir,
    check_vnc,
    reset_failure,
)
from pykubevirt.virtapi.volumes import (
    HOTPLUG_NOT_ENABLED,
    VMI_NOT_RUNNING,
    VolumeRequest,
    ephemeral_hotplug_supported,
    hotplug_enabled,
    parse_add,
    parse_remove,
    queued_requests,
    request_present,
    spec_patch,
    status_patch,
    verify,
)

log = logging.getLogger("pykubevirt.virtapi")

Route = Callable[[web.Request, str, str], Awaitable[web.StreamResponse]]
# Subresources whose name is two path segments.
TWO_SEGMENT_SUBRESOURCES = frozenset({"vnc/screenshot", "evacuate/cancel"})
VMI_CHECKS = {
    "pause": check_pause,
    "unpause": check_unpause,
    "softreboot": check_soft_reboot,
    "freeze": check_freeze,
    "unfreeze": check_unfreeze,
}


def _message(exc: BaseException) -> str:
    return exc.message if isinstance(exc, ApiError) else str(exc)


def _on_vm(request: web.Request) -> bool:
    """Whether a subresource path (/apis/GROUP/VERSION/namespaces/NS/RESOURCE/NAME/…) is a VM's, not a VMI's."""
    return [p for p in request.path.split("/") if p][5] == "virtualmachines"


def is_test_failure(exc: BaseException) -> bool:
    """A JSON patch `test` that did not match (kube-apiserver and ours answer 422 naming the tested path)."""
    if not isinstance(exc, ApiError) or exc.code != 422:
        return False
    texts = [exc.message, *(str(cause.get("message") or "") for cause in exc.causes)]
    return any("testing value" in t or "test operation does not apply" in t for t in texts)


class SubresourceAPI:
    """Handles every request under /apis/subresources.kubevirt.io/<version>/; `close()` releases its connections."""

    def __init__(
        self, client: KubeClient, handlers: HandlerClient, config: Callable[[], ClusterConfig] | None = None
    ) -> None:
        self.client = client
        self.handlers = handlers
        # The cluster configuration in effect (feature gates); None serves as KubeVirt's defaults do.
        self.config = config
        self._routes: dict[tuple[str, str], tuple[str, Route]] = {
            ("virtualmachines", "start"): ("PUT", self._start),
            ("virtualmachines", "stop"): ("PUT", self._stop),
            ("virtualmachines", "restart"): ("PUT", self._restart),
            ("virtualmachines", "migrate"): ("PUT", self._migrate),
            ("virtualmachines", "addvolume"): ("PUT", self._vm_volume),
            ("virtualmachines", "removevolume"): ("PUT", self._vm_volume),
            ("virtualmachines", "memorydump"): ("PUT", self._memory_dump),
            ("virtualmachines", "removememorydump"): ("PUT", self._remove_memory_dump),
            ("virtualmachineinstances", "addvolume"): ("PUT", self._vmi_volume),
            ("virtualmachineinstances", "removevolume"): ("PUT", self._vmi_volume),
            ("virtualmachineinstances", "pause"): ("PUT", self._vmi_command),
            ("virtualmachineinstances", "unpause"): ("PUT", self._vmi_command),
            ("virtualmachineinstances", "softreboot"): ("PUT", self._vmi_command),
            ("virtualmachineinstances", "reset"): ("PUT", self._reset),
            ("virtualmachineinstances", "freeze"): ("PUT", self._vmi_command),
            ("virtualmachineinstances", "unfreeze"): ("PUT", self._vmi_command),
            ("virtualmachineinstances", "guestosinfo"): ("GET", self._guest_agent_query),
            ("virtualmachineinstances", "userlist"): ("GET", self._guest_agent_query),
            ("virtualmachineinstances", "filesystemlist"): ("GET", self._guest_agent_query),
            ("virtualmachineinstances", "console"): ("GET", self._stream),
            ("virtualmachineinstances", "vnc"): ("GET", self._stream),
            ("virtualmachineinstances", "usbredir"): ("GET", self._stream),
            ("virtualmachineinstances", "vnc/screenshot"): ("GET", self._screenshot),
            ("virtualmachineinstances", "portforward"): ("GET", self._port_forward),
            ("virtualmachines", "portforward"): ("GET", self._port_forward),
            ("virtualmachines", "expand-spec"): ("GET", self._expand_stored),
            ("virtualmachines", "evacuate/cancel"): ("PUT", self._evacuate_cancel),
            ("virtualmachines", "objectgraph"): ("GET", self._object_graph),
            ("virtualmachineinstances", "objectgraph"): ("GET", self._object_graph),
            ("virtualmachineinstances", "evacuate/cancel"): ("PUT", self._evacuate_cancel),
        }

    async def close(self) -> None:
        await self.handlers.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request; errors become Status objects."""
        try:
            return await self._dispatch(request)
        except errors.APIError as exc:
            return error_response(exc)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if len(parts) < 3 or parts[:2] != ["apis", discovery.GROUP] or parts[2] not in discovery.VERSIONS:
            raise errors.resource_not_found()
        version, rest = parts[2], parts[3:]
        if not rest:
            return json_response(discovery.resource_list(version))
        if rest in (["version"], ["healthz"]):
            if request.method not in ("GET", "HEAD"):
                raise errors.method_not_allowed(request.method)
            return json_response(discovery.version_info()) if rest == ["version"] else await self._healthz()
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "expand-vm-spec":
            if request.method != "PUT":
                raise errors.method_not_allowed(request.method)
            return await self._expand_posted(request, rest[1])
        if len(rest) == 6 and "/".join(rest[4:]) in TWO_SEGMENT_SUBRESOURCES:
            rest = [*rest[:4], "/".join(rest[4:])]
        # Only portforward takes path parameters after its name: `portforward/PORT[/PROTOCOL]`.
        if len(rest) < 5 or rest[0] != "namespaces" or (len(rest) > 5 and rest[4] != "portforward"):
            raise errors.resource_not_found()
        namespace, resource, name, subresource = rest[1], rest[2], rest[3], rest[4]
        route = self._routes.get((resource, subresource))
        if route is None:
            raise errors.resource_not_found()
        method, handler = route
        if request.method != method:
            raise errors.method_not_allowed(request.method)
        return await handler(request, namespace, name)

    async def _healthz(self) -> web.Response:
        try:
            version = await self.client.request("GET", "/version")
        except (ApiError, OSError) as exc:
            body = {"apiserver": {"connectivity": "failed", "error": _message(exc)}, "config-resource-version": ""}
            return json_response(body, status=500)
        return json_response({"apiserver": {"connectivity": "ok", "version": version}, "config-resource-version": ""})

    # ------------------------------------------------------------------------------------------------ reads

    async def _vm(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return await self.client.get(VIRTUAL_MACHINES, name, namespace)
        except NotFound:
            raise errors.not_found(VM_RESOURCE, c.KUBEVIRT_GROUP, name) from None
        except (ApiError, OSError) as exc:
            raise errors.internal(f"unable to retrieve vm [{name}]: {_message(exc)}") from exc

    async def _vmi_or_none(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get_or_none(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        except (ApiError, OSError) as exc:
            raise errors.internal(_message(exc)) from exc

    async def _vmi(self, namespace: str, name: str) -> dict[str, Any]:
        vmi = await self._vmi_or_none(namespace, name)
        if vmi is None:
            raise errors.not_found(VMI_RESOURCE, c.KUBEVIRT_GROUP, name)
        return vmi

    async def _vmi_of_vm(self, namespace: str, name: str) -> dict[str, Any]:
        """FetchVirtualMachineInstanceForVM: the VM's own VMI (owned by it), once the VM has created one."""
        vm = await self._vm(namespace, name)
        if not (vm.get("status") or {}).get("created"):
            raise vm_conflict(name, "VMI is not started")
        vmi = await self._vmi(namespace, name)
        uid = vm["metadata"].get("uid")
        if any(ref.get("uid") == uid for ref in vmi["metadata"].get("ownerReferences") or []):
            return vmi
        raise errors.internal(f"unable to retrieve vmi [{name}] for vm: <nil>")

    # ------------------------------------------------------------------------------------------------ expand

    async def _expanded(self, vm: dict[str, Any]) -> dict[str, Any]:
        instancetype = await find_spec(self.client, vm, "instancetype")
        preference = await find_spec(self.client, vm, "preference")
        return expand_vm(vm, instancetype, preference, self.config() if self.config else ClusterConfig())

    async def _expand_stored(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """ExpandSpecVMRequestHandler: a failure to expand a stored VM is the server's (500)."""
        vm = await self._vm(namespace, name)
        try:
            return json_response(await self._expanded(vm))
        except ExpandError as exc:
            raise errors.internal(str(exc)) from None

    async def _expand_posted(self, request: web.Request, namespace: str) -> web.Response:
        """ExpandSpecRequestHandler: the VM in the body, which the caller got wrong when it cannot be expanded (400)."""
        vm = vm_from_body(await request.read(), namespace)
        try:
            return json_response(await self._expanded(vm))
        except ExpandError as exc:
            raise errors.bad_request(str(exc)) from None

    # ------------------------------------------------------------------------------------------------ VM lifecycle

    async def _start(self, request: web.Request, namespace: str, name: str) -> web.Response:
        body = await request.read()
        vm = await self._vm(namespace, name)
        vmi = await self._vmi_or_none(namespace, name)
        return await self._execute(namespace, name, vmi, decide_start(vm, vmi, body))

    async def _stop(self, request: web.Request, namespace: str, name: str) -> web.Response:
        options = parse_stop(await request.read())
        vm = await self._vm(namespace, name)
        vmi = await self._vmi_or_none(namespace, name)
        return await self._execute(namespace, name, vmi, decide_stop(vm, vmi, options))

    async def _restart(self, request: web.Request, namespace: str, name: str) -> web.Response:
        options = parse_restart(await request.read())
        check_restart_options(options)
        vm = await self._vm(namespace, name)
        vmi = await self._vmi_or_none(namespace, name)
        return await self._execute(namespace, name, vmi, decide_restart(vm, vmi, options))

    async def _migrate(self, request: web.Request, namespace: str, name: str) -> web.Response:
        options = parse_migrate_options(await request.read())
        await self._vm(namespace, name)
        migration = migration_for(name, await self._vmi_or_none(namespace, name), options)
        dry_run = bool(options.get("dryRun"))
        try:
            created = await self.client.create(MIGRATIONS, migration, namespace, dry_run=dry_run)
        except (ApiError, OSError) as exc:
            # KubeVirt answers a refused migration (its admission's reason) as an internal error.
            raise errors.internal(_message(exc)) from exc
        return json_response(created, status=202)

    async def _patch_vmi(self, namespace: str, vmi: dict[str, Any], patch: list[dict[str, Any]], dry_run: bool) -> None:
        name = str(vmi["metadata"]["name"])
        await self.client.patch(
            VIRTUAL_MACHINE_INSTANCES, name, patch, namespace, patch_type=JSON_PATCH, dry_run=dry_run
        )

    async def _execute(self, namespace: str, name: str, vmi: dict[str, Any] | None, plan: Plan) -> web.Response:
        """Send a Plan's patches in order; 202 when they are accepted."""
        if plan.vmi_patch is not None and vmi is not None:
            try:
                await self._patch_vmi(namespace, vmi, plan.vmi_patch, plan.dry_run)
            except (ApiError, OSError) as exc:
                raise errors.internal(_message(exc)) from exc
        if plan.error is not None:
            raise plan.error
        try:
            if plan.vm_patch is not None:
                await self.client.patch(
                    VIRTUAL_MACHINES, name, plan.vm_patch, namespace, patch_type=JSON_PATCH, dry_run=plan.dry_run
                )
            if plan.status_patch is not None:
                await self.client.patch(
                    VIRTUAL_MACHINES,
                    name,
                    plan.status_patch,
                    namespace,
                    patch_type=JSON_PATCH,
                    subresource="status",
                    dry_run=plan.dry_run,
                )
        except (ApiError, OSError) as exc:
            if plan.rollback is not None and vmi is not None:
                try:
                    await self._patch_vmi(namespace, vmi, plan.rollback, plan.dry_run)
                except (ApiError, OSError) as rollback_error:
                    log.error("failed to roll back the VMI grace period of %s/%s: %s", namespace, name, rollback_error)
            if is_test_failure(exc):
                raise vm_conflict(name, _message(exc)) from exc
            raise errors.internal(_message(exc)) from exc
        return web.Response(status=202)

    # ------------------------------------------------------------------------------------------------ volumes

    def _require_hotplug(self) -> None:
        if self.config is not None and not hotplug_enabled(self.config()):
            raise errors.bad_request(HOTPLUG_NOT_ENABLED)

    async def _volume_request(self, request: web.Request) -> VolumeRequest:
        self._require_hotplug()
        action = request.path.rstrip("/").rsplit("/", 1)[1]
        body = await request.read()
        return parse_add(body) if action == "addvolume" else parse_remove(body)

    async def _vmi_volume(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """Hotplug into (or unplug from) the running VMI only: the VM, if any, keeps its spec."""
        volume_request = await self._volume_request(request)
        vmi = await self._vmi(namespace, name)
        await self._patch_vmi_volumes(namespace, name, vmi, volume_request)
        return web.Response(status=202)

    async def _patch_vmi_volumes(
        self, namespace: str, name: str, vmi: dict[str, Any], volume_request: VolumeRequest
    ) -> None:
        if (vmi.get("status") or {}).get("phase") != c.PHASE_RUNNING:
            raise vmi_conflict(name, VMI_NOT_RUNNING)
        spec = vmi.get("spec") or {}
        if (why := verify(spec.get("volumes") or [], volume_request)) is not None:
            raise vmi_conflict(name, why)
        try:
            await self._patch_vmi(namespace, vmi, spec_patch("", spec, volume_request), volume_request.dry_run)
        except (ApiError, OSError) as exc:
            if is_test_failure(exc):
                raise vmi_conflict(name, _message(exc)) from exc
            if isinstance(exc, ApiError) and exc.code == 422:
                raise errors.APIError(422, "Invalid", exc.message) from exc
            raise errors.internal(f"unable to patch vmi: {_message(exc)}") from exc

    async def _vm_volume(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """Persist the change in the VM's template, and apply it to the VM's running VMI too; with the HotplugVolumes
        gate, queue it in the VM's status.volumeRequests for the VM controller to do both."""
        volume_request = await self._volume_request(request)
        vm = await self._vm(namespace, name)
        template = (vm.get("spec") or {}).get("template") or {}
        spec = template.get("spec") or {}
        if (why := verify(spec.get("volumes") or [], volume_request)) is not None:
            raise vm_conflict(name, why)
        if self.config is not None and ephemeral_hotplug_supported(self.config()):
            await self._queue_vm_volume_request(namespace, name, vm, volume_request)
            return web.Response(status=202)
        try:
            await self.client.patch(
                VIRTUAL_MACHINES,
                name,
                spec_patch("/spec/template", spec, volume_request),
                namespace,
                patch_type=JSON_PATCH,
                dry_run=volume_request.dry_run,
            )
        except (ApiError, OSError) as exc:
            if is_test_failure(exc):
                raise vm_conflict(name, _message(exc)) from exc
            if isinstance(exc, ApiError) and exc.code == 422:
                raise errors.APIError(422, "Invalid", exc.message) from exc
            raise errors.internal(f"unable to patch vm: {_message(exc)}") from exc
        vmi = await self._vmi_or_none(namespace, name)
        running = vmi is not None and (vmi.get("status") or {}).get("phase") == c.PHASE_RUNNING
        if vmi is not None and running and not (vmi["metadata"].get("deletionTimestamp")):
            if not request_present(vmi.get("spec") or {}, volume_request):
                await self._patch_vmi_volumes(namespace, name, vmi, volume_request)
        return web.Response(status=202)

    async def _queue_vm_volume_request(
        self, namespace: str, name: str, vm: dict[str, Any], volume_request: VolumeRequest
    ) -> None:
        requests = list((vm.get("status") or {}).get("volumeRequests") or [])
        try:
            queued = queued_requests(requests, volume_request)
        except ValueError as exc:
            raise vm_conflict(name, str(exc)) from exc
        await self._patch_vm_status(namespace, name, status_patch(requests, queued), volume_request.dry_run)

    async def _patch_vm_status(self, namespace: str, name: str, patch: list[dict[str, Any]], dry_run: bool) -> None:
        """A JSON patch of the VM's status: a failed `test` is a conflict, another refusal passes through."""
        try:
            await self.client.patch(
                VIRTUAL_MACHINES, name, patch, namespace, patch_type=JSON_PATCH, subresource="status", dry_run=dry_run
            )
        except (ApiError, OSError) as exc:
            if is_test_failure(exc):
                raise vm_conflict(name, _message(exc)) from exc
            if isinstance(exc, ApiError) and exc.code == 422:
                raise errors.APIError(422, "Invalid", exc.message) from exc
            raise errors.internal(f"unable to patch vm status: {_message(exc)}") from exc

    # ------------------------------------------------------------------------------------------------ memory dump

    async def _memory_dump(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """Associate a claim with the running VM for virt-controller to dump the guest's memory into."""
        self._require_hotplug()
        dump = memory_dump.parse_request(await request.read())
        vm = await self._vm(namespace, name)
        dump = memory_dump.with_claim(vm, dump)
        vmi = await self._vmi(namespace, name)
        memory_dump.check_running(vmi)
        memory_dump.check_claim(vmi, await self._claim(namespace, dump["claimName"]))
        await self._patch_vm_status(namespace, name, memory_dump.dump_patch(vm, dump), False)
        return web.Response(status=202)

    async def _remove_memory_dump(self, request: web.Request, namespace: str, name: str) -> web.Response:
        vm = await self._vm(namespace, name)
        await self._patch_vm_status(namespace, name, memory_dump.remove_patch(vm), False)
        return web.Response(status=202)

    async def _claim(self, namespace: str, name: str) -> dict[str, Any]:
        if not name:  # client-go refuses an empty name before asking; ours would list the claims instead.
            raise errors.internal("unable to retrieve pvc []: resource name may not be empty")
        try:
            return await self.client.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)
        except NotFound:
            raise memory_dump.claim_not_found(name) from None
        except (ApiError, OSError) as exc:
            raise errors.internal(f"unable to retrieve pvc [{name}]: {_message(exc)}") from exc

    # ------------------------------------------------------------------------------------------------ VMI, via handler

    async def _vmi_command(self, request: web.Request, namespace: str, name: str) -> web.Response:
        action = request.path.rstrip("/").rsplit("/", 1)[1]
        body = await request.read()
        dry_run = False
        if action == "unpause":
            try:
                vm: dict[str, Any] | None = await self._vm(namespace, name)
            except errors.APIError as exc:
                if exc.code != 404:
                    raise
                vm = None
            if (problem := check_unpause_vm(vm)) is not None:
                raise problem
        if action in ("pause", "unpause"):
            dry_run = is_dry_run(parse_pause(body, "PauseOptions" if action == "pause" else "UnpauseOptions").dry_run)
        vmi = await self._vmi(namespace, name)
        problem = VMI_CHECKS[action](vmi) or check_handler_reachable(vmi)
        if problem is not None:
            raise problem
        if not dry_run:
            await self.handlers.put(vmi, action, body)
        return web.Response(status=200)

    async def _reset(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """A hard reset through the VMI's virt-handler; KubeVirt checks nothing first but explains a failure on a VMI
        that is not running (it may have been on its way from Scheduled)."""
        body = await request.read()
        vmi = await self._vmi(namespace, name)
        problem = check_handler_reachable(vmi)
        if problem is not None:
            raise reset_failure(vmi, problem)
        try:
            await self.handlers.put(vmi, "reset", body)
        except errors.APIError as exc:
            raise reset_failure(vmi, exc, from_handler=True) from exc
        return web.Response(status=200)

    async def _screenshot(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """The VMI's screen as a PNG, checked as a VNC connection is (KubeVirt's ScreenshotRequestHandler)."""
        vmi = await self._vmi(namespace, name)
        problem = check_vnc(vmi) or check_handler_reachable(vmi)
        if problem is not None:
            raise problem
        move = request.query.get("moveCursor", "false")
        image = await self.handlers.get_bytes(vmi, "vnc/screenshot", {"moveCursor": move})
        return web.Response(body=image, content_type="image/png")

    async def _evacuate_cancel(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """Stop evacuating a VM's or VMI's VMI off its node (its evacuationNodeName removed)."""
        vmi = await (self._vmi_of_vm if _on_vm(request) else self._vmi)(namespace, name)
        taint_key = (self.config() if self.config else ClusterConfig()).migrations.node_drain_taint_key
        # A VMI on no node yet has no node whose taint could matter.
        if taint_key and evacuation_node(vmi):
            try:
                node = await self.client.get(NODES, evacuation_node(vmi))
            except (ApiError, OSError) as exc:
                raise errors.internal(_message(exc)) from exc
            if (refusal := drain_taint_refusal(node, taint_key)) is not None:
                raise refusal
        if not (vmi.get("status") or {}).get("evacuationNodeName"):
            return web.Response(status=200)
        body = await request.read()
        if not body.strip():
            raise errors.bad_request("No body")
        options = parse_evacuate_cancel(body)
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                vmi["metadata"]["name"],
                cancel_patch(options.evacuation_node_name),
                namespace,
                patch_type=JSON_PATCH,
                dry_run=is_dry_run(options.dry_run),
            )
        except (ApiError, OSError) as exc:
            raise errors.internal(_message(exc)) from exc
        return web.Response(status=200)

    async def _object_graph(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """What the VM or VMI depends on (KubeVirt's ObjectGraph feature gate, Alpha)."""
        if not (self.config() if self.config else ClusterConfig()).gate_enabled("ObjectGraph"):
            raise errors.bad_request(object_graph.GATE_DISABLED)
        is_vm = _on_vm(request)
        obj = await (self._vm if is_vm else self._vmi)(namespace, name)
        include, selector = object_graph.parse_options(await request.read())
        try:
            pods = await self.client.list(PODS, namespace, label_selector="kubevirt.io=virt-launcher")
        except (ApiError, OSError) as exc:
            raise errors.internal(_message(exc)) from exc
        graph = (object_graph.vm_graph if is_vm else object_graph.vmi_graph)(obj, pods.get("items") or [])
        return json_response(object_graph.filtered(graph, include, selector))

    async def _guest_agent_query(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """guestosinfo, userlist, filesystemlist: what the VMI's guest agent reported, through its virt-handler."""
        query = request.path.rstrip("/").rsplit("/", 1)[1]
        vmi = await self._vmi(namespace, name)
        problem = check_guest_agent(vmi) or check_handler_reachable(vmi)
        if problem is not None:
            raise problem
        return json_response(await self.handlers.get_json(vmi, query))

    async def _stream(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """console, vnc and usbredir: check the VMI, open the handler's websocket, then accept the client's and pump
        bytes."""
        action = request.path.rstrip("/").rsplit("/", 1)[1]
        vmi = await self._vmi(namespace, name)
        check = {"console": check_console, "vnc": check_vnc, "usbredir": check_usbredir}[action]
        problem = check(vmi) or check_handler_reachable(vmi)
        if problem is not None:
            raise problem
        query = {k: v for k, v in request.query.items() if k == "preserveSession"}
        upstream = await self.handlers.dial(vmi, action, query)
        client = web.WebSocketResponse(protocols=(STREAM_PROTOCOL,), max_msg_size=0)
        if not client.can_prepare(request).ok:
            await upstream.close()
            raise errors.bad_request(NOT_WEBSOCKET)
        try:
            await client.prepare(request)
            log.info("%s of %s/%s connected", action, namespace, name)
            await pump_websockets(client, upstream)
        finally:
            # Runs on cancellation too (the embedded server cancels handlers of clients that went away).
            with contextlib.suppress(Exception):
                await upstream.close()
            with contextlib.suppress(Exception):
                await client.close()
        return client

    async def _port_forward(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """Dial the guest's port, then accept the client's websocket and pump bytes (upstream's order)."""
        target = parse_target([p for p in request.path.split("/") if p][8:])
        vmi = await (self._vmi_of_vm if _on_vm(request) else self._vmi)(namespace, name)
        if (problem := check_port_forward(vmi)) is not None:
            raise problem
        return await forward(request, vmi, target)
