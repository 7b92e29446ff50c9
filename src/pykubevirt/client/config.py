"""Where the API server is and how to authenticate: a kubeconfig file, or the in-cluster service account."""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Where a test harness that runs a pod's command as a plain process puts the pod's service-account files instead.
SERVICE_ACCOUNT_DIR_ENV = "PYKUBEVIRT_SERVICE_ACCOUNT_DIR"
# A kubeconfig cluster extension naming the embedded API server's unix socket (kubectl ignores extensions).
LOCAL_SOCKET_EXTENSION = "pykubevirt.io/local-socket"


class ConfigError(Exception):
    """The kubeconfig is missing, unreadable or lacks what is needed."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    server: str
    token: str = ""
    token_file: str = ""
    ca_data: bytes = b""
    client_cert_data: bytes = b""
    client_key_data: bytes = b""
    insecure_skip_tls_verify: bool = False
    namespace: str = "default"
    # The same API server's unix socket, for a client on its host: no TLS on every request (see KubeClient).
    local_socket: str = ""

    def bearer_token(self) -> str:
        if self.token_file:
            # Projected service-account tokens rotate; read them on use.
            return Path(self.token_file).read_text().strip()
        return self.token

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        if self.insecure_skip_tls_verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        context = ssl.create_default_context(cadata=self.ca_data.decode() if self.ca_data else None)
        if self.client_cert_data and self.client_key_data:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                cert = Path(tmp, "cert.pem")
                key = Path(tmp, "key.pem")
                cert.write_bytes(self.client_cert_data)
                key.write_bytes(self.client_key_data)
                context.load_cert_chain(str(cert), str(key))
        return context


def _data(entry: dict[str, Any], field: str, base: Path) -> bytes:
    if entry.get(f"{field}-data"):
        return base64.b64decode(entry[f"{field}-data"])
    if entry.get(field):
        path = Path(entry[field])
        return (path if path.is_absolute() else base / path).read_bytes()
    return b""


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return dict(item.get(what) or {})
    raise ConfigError(f"{what} {name!r} not found in the kubeconfig")


def local_socket_of(cluster: dict[str, Any]) -> str:
    """The unix socket a kubeconfig's cluster entry names in its pykubevirt extension, or ''."""
    for entry in cluster.get("extensions") or []:
        if not isinstance(entry, dict) or entry.get("name") != LOCAL_SOCKET_EXTENSION:
            continue
        extension = entry.get("extension")
        return str(extension.get("path") or "") if isinstance(extension, dict) else ""
    return ""


def load_kubeconfig(path: str | os.PathLike[str] | None = None, *, context: str | None = None) -> ClientConfig:
    """Read a kubeconfig (`path`, else $KUBECONFIG's first entry, else ~/.kube/config) for `context`."""
    if path is None:
        path = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or Path.home() / ".kube" / "config"
    file = Path(path)
    try:
        config = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {file} is not valid YAML") from exc
    context_name = context or config.get("current-context")
    if not context_name:
        raise ConfigError(f"kubeconfig {file} has no current-context")
    ctx = _named(config.get("contexts") or [], context_name, "context")
    cluster = _named(config.get("clusters") or [], str(ctx.get("cluster")), "cluster")
    user = _named(config.get("users") or [], str(ctx.get("user")), "user") if ctx.get("user") else {}
    base = file.parent
    if not cluster.get("server"):
        raise ConfigError(f"cluster {ctx.get('cluster')!r} in {file} has no server")
    return ClientConfig(
        server=str(cluster["server"]).rstrip("/"),
        token=str(user.get("token") or ""),
        token_file=str(user.get("tokenFile") or ""),
        ca_data=_data(cluster, "certificate-authority", base),
        client_cert_data=_data(user, "client-certificate", base),
        client_key_data=_data(user, "client-key", base),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
        namespace=str(ctx.get("namespace") or "default"),
        local_socket=local_socket_of(cluster),
    )


def in_cluster_config() -> ClientConfig:
    """The pod's service account, as every Kubernetes client finds it."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not running in a cluster: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host:
        host = f"[{host}]"
    directory = Path(os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
    namespace_file = directory / "namespace"
    return ClientConfig(
        server=f"https://{host}:{port}",
        token_file=str(directory / "token"),
        ca_data=(directory / "ca.crt").read_bytes(),
        namespace=namespace_file.read_text().strip() if namespace_file.exists() else "default",
    )


def load_config(kubeconfig: str | None = None, *, context: str | None = None) -> ClientConfig:
    """A kubeconfig when one is named or found; otherwise the in-cluster service account."""
    if kubeconfig or os.environ.get("KUBECONFIG") or (Path.home() / ".kube" / "config").exists():
        return load_kubeconfig(kubeconfig, context=context)
    return in_cluster_config()
