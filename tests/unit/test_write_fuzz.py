"""No write answers 500: objects with one field replaced by a value of another type, through every write path.

Each case takes a valid object, puts a value of the wrong type somewhere in it (or in the patch), and sends it by
create, update, merge, strategic merge or JSON patch. Every outcome must be a success or a 4xx Status, never an
exception from inside the server (which the HTTP layer would answer with 500, possibly after the commit).
"""

from __future__ import annotations

import collections
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import errors, json_codec
from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kinds import ALL_KINDS
from pykubevirt.apiserver.request_context import RequestContext
from pykubevirt.apiserver.server import EmbeddedAPIServer, ServerOptions

GARBAGE: list[Any] = [None, 5, -1, 1.5, True, "x", "", [], ["x"], [5], {}, {"a": 1}, {"a": "b"}, [{"a": 1}], [None]]
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}


def configmap(i: int) -> dict[str, Any]:
    meta = {"name": f"cm-{i}", "labels": {"a": "b"}, "ownerReferences": [OWNER], "finalizers": ["example.com/f"]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def pod(i: int) -> dict[str, Any]:
    container = {
        "name": "compute",
        "image": "launcher",
        "env": [{"name": "A", "value": "b"}],
        "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "labels": {"a": "b"}, "annotations": {"n": "v"}},
        "spec": {"containers": [container], "volumes": [{"name": "v", "emptyDir": {}}], "nodeSelector": {"a": "b"}},
    }


def vm(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": f"vm-{i}", "labels": {"a": "b"}, "ownerReferences": [OWNER]},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
    }


def node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i}", "labels": {"a": "b"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def namespace(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{i}", "labels": {"a": "b"}}}


KINDS: list[tuple[str, str, Callable[[int], dict[str, Any]]]] = [
    ("", "configmaps", configmap),
    ("", "pods", pod),
    ("kubevirt.io", "virtualmachines", vm),
    ("", "nodes", node),
    ("", "namespaces", namespace),
]


def paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*prefix, index))


def mutated(obj: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """`obj` with one value replaced by garbage, or garbage added under a well-known field name."""
    copy = json.loads(json_codec.dumps(obj))  # as a client sends it back (JSON of the answer)
    path = rnd.choice([p for p in paths(copy) if p])
    parent: Any = copy
    for key in path[:-1]:
        parent = parent[key]
    if rnd.random() < 0.2 and isinstance(parent, dict):
        field = rnd.choice(["metadata", "spec", "status", "labels", "ownerReferences", "finalizers", "data"])
        parent[field] = rnd.choice(GARBAGE)
    else:
        parent[path[-1]] = rnd.choice(GARBAGE)
    return copy


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedAPIServer]:
    embedded = EmbeddedAPIServer(ServerOptions(data_dir=tmp_path / "data", fsync=False))
    embedded._bootstrap()
    embedded.crds.install_crds([crd_manifest(kind) for kind in ALL_KINDS])
    namespaces = embedded.registry.get("", "v1", "namespaces")
    assert namespaces is not None
    embedded.api.create(namespaces, None, namespace(-1) | {"metadata": {"name": "fuzz"}}, RequestContext())
    yield embedded
    embedded.store.close()


def write(server: EmbeddedAPIServer, rnd: random.Random, i: int) -> str:
    group, plural, make = rnd.choice(KINDS)
    resource = server.registry.get(group, "v1", plural)
    assert resource is not None
    ns = "fuzz" if resource.namespaced else None
    api, ctx = server.api, RequestContext()
    body = make(i)
    operation = rnd.choice(["create", "update", "merge", "strategic", "json"])
    if operation == "create":
        api.create(resource, ns, mutated(body, rnd), ctx)
        return f"{plural} {operation}"
    created = api.create(resource, ns, body, ctx)
    name = created["metadata"]["name"]
    if operation == "update":
        api.update(resource, ns, name, mutated(created, rnd), ctx)
    elif operation == "merge" or (operation == "strategic" and not resource.builtin):
        api.patch(resource, ns, name, json.dumps(mutated(body, rnd)).encode(), "application/merge-patch+json", ctx)
    elif operation == "strategic":
        patch = json.dumps(mutated(body, rnd)).encode()
        api.patch(resource, ns, name, patch, "application/strategic-merge-patch+json", ctx)
    else:
        target = "/" + "/".join(str(k) for k in rnd.choice([p for p in paths(created) if p]))
        ops = [{"op": rnd.choice(["add", "replace"]), "path": target, "value": rnd.choice(GARBAGE)}]
        api.patch(resource, ns, name, json.dumps(ops).encode(), "application/json-patch+json", ctx)
    return f"{plural} {operation}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_badly_typed_writes_are_answered_with_4xx_never_an_exception(server: EmbeddedAPIServer, seed: int) -> None:
    rnd = random.Random(seed)
    failures: collections.Counter[str] = collections.Counter()
    for i in range(400):
        try:
            write(server, rnd, i)
        except errors.APIError as exc:
            if exc.code >= 500:
                failures[f"{exc.code} {exc.message[:120]}"] += 1
        except Exception as exc:
            failures[f"{type(exc).__name__}: {exc}"] += 1
    assert not failures, failures.most_common(10)
