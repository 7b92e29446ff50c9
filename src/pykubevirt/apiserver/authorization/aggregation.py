"""ClusterRole aggregation: a role with an aggregationRule gets the rules of every ClusterRole its selectors pick.

As kube-controller-manager's clusterrole-aggregation controller: rules are the union, in the order of the selected
roles' names, without duplicates; aggregated roles feed other aggregated ones (view into edit into admin), so the
computation runs to a fixed point.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.label_selectors import LabelSelector, SelectorError, label_selector_from_dict
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import Event

log = logging.getLogger("pykubevirt.apiserver.aggregation")

CLUSTER_ROLES_COLLECTION = "rbac.authorization.k8s.io/clusterroles"


def _selectors(role: Mapping[str, Any]) -> list[LabelSelector] | None:
    rule = role.get("aggregationRule")
    if not isinstance(rule, dict):
        return None
    selectors = []
    for raw in rule.get("clusterRoleSelectors") or []:
        try:
            selectors.append(label_selector_from_dict(raw))
        except (SelectorError, AttributeError, TypeError):
            continue
    return selectors


def _name(role: Mapping[str, Any]) -> str:
    return str((role.get("metadata") or {}).get("name", ""))


def aggregate(cluster_roles: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rules each aggregated ClusterRole should have, by name (only roles with an aggregationRule)."""
    rules = {_name(r): [x for x in r.get("rules") or [] if isinstance(x, dict)] for r in cluster_roles}
    labels = {_name(r): dict((r.get("metadata") or {}).get("labels") or {}) for r in cluster_roles}
    aggregated = {_name(r): s for r in cluster_roles if (s := _selectors(r)) is not None}
    result: dict[str, list[dict[str, Any]]] = {}
    for _ in range(len(cluster_roles) + 1):
        changed = False
        for name, selectors in aggregated.items():
            union: list[dict[str, Any]] = []
            for other in sorted(rules):
                if other == name or not any(s.matches(labels[other]) for s in selectors if not s.empty):
                    continue
                for rule in rules[other]:
                    if rule not in union:
                        union.append(rule)
            if union != rules[name]:
                rules[name] = union
                changed = True
            result[name] = union
        if not changed:
            break
    return result


class AggregationController:
    """Keeps aggregated ClusterRoles' rules current; woken by every committed change to a ClusterRole."""

    def __init__(self, api: ObjectAPI, cluster_roles: Resource) -> None:
        self.api = api
        self.resource = cluster_roles
        self._dirty = asyncio.Event()
        self._dirty.set()
        api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.collection == CLUSTER_ROLES_COLLECTION:
            self._dirty.set()

    def sync(self) -> None:
        """Write the rules of every aggregated role whose stored rules differ."""
        roles = [r.value for r in self.api.store.records(CLUSTER_ROLES_COLLECTION)]
        by_name = {_name(r): r for r in roles}
        ctx = RequestContext(user=SYSTEM_USER)
        for name, rules in aggregate(roles).items():
            current = by_name[name]
            if (current.get("rules") or []) == rules:
                continue
            updated = copy_json(current)
            updated["rules"] = rules
            try:
                self.api.update(self.resource, None, name, updated, ctx)
            except errors.APIError as exc:
                log.warning("could not aggregate the rules of ClusterRole %s: %s", name, exc)

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.sync()
