"""Informer caches drop managedFields, as client-go's TransformStripManagedFields, without losing them on the server:
an update sent from the cache keeps the stored entries and adds its own manager's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.client.informer import EventHandler, Informer
from pykubevirt.client.resources import CONFIG_MAPS, NAMESPACES
from tests.support.apiserver_process import APIServerProcess
from tests.support.waiting import eventually
from tests.support.watching import listed_once

pytestmark = pytest.mark.asyncio(loop_scope="function")


def config_map(namespace: str, name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {}}


async def test_cached_objects_have_no_managed_fields_and_updates_from_them_keep_the_stored_ones(
    apiserver: APIServerProcess,
) -> None:
    config = load_kubeconfig(apiserver.kubeconfig)
    creator, updater = KubeClient(config, user_agent="creator/1"), KubeClient(config, user_agent="updater/1")
    namespace = "informer-strip"
    informer = Informer(updater, CONFIG_MAPS, namespace=namespace)
    seen: list[dict[str, Any]] = []
    watched = asyncio.Event()

    def added(obj: dict[str, Any]) -> None:
        seen.append(obj)
        if obj["metadata"]["name"] == "watched":
            watched.set()

    informer.add_handler(EventHandler(on_add=added, on_update=lambda _old, new: seen.append(new)))
    task = asyncio.create_task(informer.run())
    try:
        await creator.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        await creator.create(CONFIG_MAPS, config_map(namespace, "listed"), namespace)
        await asyncio.wait_for(informer.synced.wait(), 10)
        await creator.create(CONFIG_MAPS, config_map(namespace, "watched"), namespace)
        await asyncio.wait_for(watched.wait(), 10)
        stored = await creator.get(CONFIG_MAPS, "watched", namespace)
        assert [e["manager"] for e in stored["metadata"]["managedFields"]] == ["creator"]
        for key in (f"{namespace}/listed", f"{namespace}/watched"):
            cached = informer.get(key)
            assert cached is not None and "managedFields" not in cached["metadata"]
        assert all("managedFields" not in obj["metadata"] for obj in seen)

        cached = informer.get(f"{namespace}/watched")
        assert cached is not None
        edited = copy_json(cached)
        edited["data"] = {"key": "value"}
        await updater.update(CONFIG_MAPS, edited)
        stored = await creator.get(CONFIG_MAPS, "watched", namespace)
        managers = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
        assert set(managers) == {"creator", "updater"}
        assert managers["updater"] == {"f:data": {"f:key": {}}}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await creator.close()
        await updater.close()


async def test_a_write_is_served_from_the_cache_until_the_watch_brings_it_or_a_newer_version(
    apiserver: APIServerProcess,
) -> None:
    config = load_kubeconfig(apiserver.kubeconfig)
    writer, other = KubeClient(config, user_agent="writer/1"), KubeClient(config, user_agent="other/1")
    namespace = "informer-wrote"
    informer = Informer(writer, CONFIG_MAPS, namespace=namespace)
    key = f"{namespace}/cm"
    try:
        await writer.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        await writer.create(CONFIG_MAPS, config_map(namespace, "cm"), namespace)
        await writer.create(CONFIG_MAPS, config_map(namespace, "elsewhere"), namespace)
        # A cache that lists and then hears nothing: every write below is one the watch has not brought back yet.
        await listed_once(informer)
        listed = informer.get(key)
        assert listed is not None

        edited = copy_json(listed)
        edited["data"] = {"step": "1"}
        written = await writer.update(CONFIG_MAPS, edited)
        informer.wrote(written, listed["metadata"]["resourceVersion"])
        served = informer.get(key)
        assert served is not None and served["data"] == {"step": "1"}
        assert served["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
        assert "managedFields" not in served["metadata"]
        assert informer.get_by_name(namespace, "cm") is served
        # A second write from what the cache serves is based on the current version: it is not refused.
        again = copy_json(served)
        again["data"] = {"step": "2"}
        informer.wrote(await writer.update(CONFIG_MAPS, again), served["metadata"]["resourceVersion"])
        second = informer.get(key)
        assert second is not None and second["data"] == {"step": "2"}

        # A write based on a version the cache does not hold serves nothing new.
        elsewhere = informer.get(f"{namespace}/elsewhere")
        assert elsewhere is not None
        fresh = await writer.get(CONFIG_MAPS, "elsewhere", namespace)
        fresh["data"] = {"from": "a fresh read"}
        first = await writer.update(CONFIG_MAPS, fresh)
        first["data"] = {"from": "a second write"}
        informer.wrote(await writer.update(CONFIG_MAPS, first), first["metadata"]["resourceVersion"])
        assert informer.get(f"{namespace}/elsewhere") is elsewhere

        # Once the cache moves on (here past the write, to another writer's newer version), the cache is served.
        await other.patch(CONFIG_MAPS, "cm", {"data": {"step": "3"}}, namespace)
        task = asyncio.create_task(informer.run())

        async def caught_up() -> bool:
            cached = informer.get(key)
            return cached is not None and cached["data"] == {"step": "3"}

        await eventually(caught_up)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await writer.close()
        await other.close()
