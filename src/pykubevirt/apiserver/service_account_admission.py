"""kube-apiserver's ServiceAccount admission plugin: a new pod runs as an existing service account, and unless it or
its account opts out, every container gets the account's token, the cluster CA and the namespace at
/var/run/secrets/kubernetes.io/serviceaccount (a projected `kube-api-access-*` volume)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.api.pod_defaults import DEFAULT_SERVICE_ACCOUNT
from pykubevirt.apiserver import metadata
from pykubevirt.apiserver.namespace_credentials import ROOT_CA_CONFIG_MAP, ROOT_CA_KEY
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext
    from pykubevirt.apiserver.store import Store

TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# Kube's bound-token default: an hour and 7 s, the 7 s marking tokens the API server may extend for old clients.
TOKEN_EXPIRATION_SECONDS = 3607
PROJECTED_DEFAULT_MODE = 0o644
SERVICE_ACCOUNTS = "core/serviceaccounts"


def token_volume(name: str) -> dict[str, Any]:
    """The projected volume the plugin adds: token, `ca.crt` from kube-root-ca.crt, and the pod's namespace."""
    return {
        "name": name,
        "projected": {
            "defaultMode": PROJECTED_DEFAULT_MODE,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": ROOT_CA_KEY, "path": ROOT_CA_KEY}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }


def should_automount(pod_spec: dict[str, Any], account: dict[str, Any] | None) -> bool:
    """The pod's own choice first, then its account's; mounted when neither says."""
    if pod_spec.get("automountServiceAccountToken") is not None:
        return bool(pod_spec["automountServiceAccountToken"])
    if account is not None and account.get("automountServiceAccountToken") is not None:
        return bool(account["automountServiceAccountToken"])
    return True


def mount_token(pod_spec: dict[str, Any]) -> None:
    """Mount the token volume in every container and init container that has nothing at its path (in place)."""
    volumes = pod_spec.get("volumes") or []
    names = (str(volume.get("name") or "") for volume in volumes)
    existing = next((name for name in names if name.startswith(TOKEN_VOLUME_PREFIX)), "")
    name = existing or metadata.generate_name(TOKEN_VOLUME_PREFIX)
    needed = False
    for kind in ("initContainers", "containers"):
        for container in pod_spec.get(kind) or []:
            mounts = container.get("volumeMounts") or []
            if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            container["volumeMounts"] = [*mounts, {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}]
            needed = True
    if needed and not existing:
        pod_spec["volumes"] = [*volumes, token_volume(name)]


class ServiceAccountAdmission:
    """Defaults, checks and mounts a new pod's service account; reads ServiceAccounts from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and not resource.group and resource.kind == "Pod"

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        if operation != "CREATE" or MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
            return obj
        spec = obj.setdefault("spec", {})
        name = str(spec.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT)
        spec["serviceAccountName"] = spec["serviceAccount"] = name
        namespace = str(meta.get("namespace") or "")
        record = self.store.get(SERVICE_ACCOUNTS, f"{namespace}/{name}")
        account = record.value if record is not None else None
        # Kube waits up to ~2 s for a missing default account, which its controller makes with the namespace; the
        # in-process controller makes it within moments, so the pod is admitted as it will be once the account is.
        if account is None and name != DEFAULT_SERVICE_ACCOUNT:
            # Named by its generateName before it has a name, as kube's admission errors are.
            pod = str(meta.get("name") or meta.get("generateName") or "Unknown")
            raise errors.forbidden(
                f'pods "{pod}" is forbidden: error looking up service account {namespace}/{name}: '
                f'serviceaccount "{name}" not found',
                plural="pods",
                name=pod,
            )
        if should_automount(spec, account):
            mount_token(spec)
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        return []
