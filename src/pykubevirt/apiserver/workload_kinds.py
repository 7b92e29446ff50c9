"""The apps/v1 workload kinds, which kube-apiserver serves and `deploy/` is made of.

`--plain` stores them (their schemas are kube's, from the published definitions); their controllers are the
cluster's (kube-controller-manager and the kubelet), which the embedded cluster does not run.
"""

from __future__ import annotations

from pykubevirt.api.scale import ScaleSubresource
from pykubevirt.apiserver.builtin import OPEN_SCHEMA
from pykubevirt.apiserver.resources import Resource


def _apps(kind: str, short_names: tuple[str, ...], *, scale: bool) -> Resource:
    plural = kind.lower() + "s"
    subresources = frozenset({"status", "scale"} if scale else {"status"})
    return Resource(
        "apps",
        "v1",
        kind,
        plural,
        kind.lower(),
        True,
        OPEN_SCHEMA,
        short_names=short_names,
        categories=("all",),
        subresources=subresources,
        builtin=True,
        # kube's apps strategies show spec.selector, a LabelSelector, as the Scale's selector string.
        scale=ScaleSubresource(".spec.replicas", ".status.replicas", ".spec.selector") if scale else None,
    )


WORKLOAD_RESOURCES = (
    _apps("Deployment", ("deploy",), scale=True),
    _apps("DaemonSet", ("ds",), scale=False),
    _apps("ReplicaSet", ("rs",), scale=True),
    _apps("StatefulSet", ("sts",), scale=True),
)
