"""The defaults kube-apiserver gives a Pod: core/v1's defaulting functions and the ServiceAccount (its name) and
DefaultTolerationSeconds admission plugins, applied in place to a pod as decoded from a request (the Priority plugin,
which reads PriorityClasses, is `api.pod_priority`).

The ServiceAccount plugin's token volume is left out: nothing here mints the tokens it would mount.
"""

from __future__ import annotations

from typing import Any

DEFAULT_GRACE_PERIOD_SECONDS = 30
DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_SERVICE_ACCOUNT = "default"
DEFAULT_FILE_MODE = 0o644
DEFAULT_TOLERATION_SECONDS = 300
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NO_EXECUTE = "NoExecute"
# The volume sources whose files get a mode; a volume naming none of its sources at all is an emptyDir.
_MODED_SOURCES = ("secret", "configMap", "downwardAPI", "projected")
_NOT_A_SOURCE = ("name",)
_PROBE_DEFAULTS = (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3))


def default_pull_policy(image: str) -> str:
    """Kubernetes' default: Always for `:latest` or an untagged image, else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default(parent: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` unless given; JSON's null and a string's "" read as not given, as Go's zero values do."""
    if parent.get(key) is None or parent.get(key) == "":
        parent[key] = value


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _dict(parent: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = parent.get(key)
    return value if isinstance(value, dict) else None


def _http_get(handler: dict[str, Any] | None) -> None:
    action = _dict(handler, "httpGet") if handler is not None else None
    if action is not None:
        _default(action, "path", "/")
        _default(action, "scheme", "HTTP")


def _probe(container: dict[str, Any], key: str) -> None:
    probe = _dict(container, key)
    if probe is None:
        return
    for field, value in _PROBE_DEFAULTS:
        if not probe.get(field):
            probe[field] = value
    _http_get(probe)


def _field_refs(container: dict[str, Any]) -> None:
    for env in _dicts(container.get("env")):
        source = _dict(env, "valueFrom")
        ref = _dict(source, "fieldRef") if source is not None else None
        if ref is not None:
            _default(ref, "apiVersion", "v1")


def _container(container: dict[str, Any], host_network: bool) -> None:
    if not container.get("imagePullPolicy"):
        container["imagePullPolicy"] = default_pull_policy(str(container.get("image") or ""))
    _default(container, "terminationMessagePath", "/dev/termination-log")
    _default(container, "terminationMessagePolicy", "File")
    _default(container, "resources", {})
    resources = container["resources"]
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        # A limit without a request is also the request (SetDefaults_Pod).
        _default(resources, "requests", {})
        if isinstance(resources["requests"], dict):
            for name, quantity in resources["limits"].items():
                resources["requests"].setdefault(name, quantity)
    for port in _dicts(container.get("ports")):
        _default(port, "protocol", "TCP")
        if host_network and not port.get("hostPort") and port.get("containerPort"):
            port["hostPort"] = port["containerPort"]
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(container, key)
    lifecycle = _dict(container, "lifecycle")
    if lifecycle is not None:
        for hook in ("postStart", "preStop"):
            _http_get(_dict(lifecycle, hook))
    _field_refs(container)


def _volume(volume: dict[str, Any]) -> None:
    if not [key for key in volume if key not in _NOT_A_SOURCE]:
        volume["emptyDir"] = {}
    for key in _MODED_SOURCES:
        source = _dict(volume, key)
        if source is not None:
            _default(source, "defaultMode", DEFAULT_FILE_MODE)
    host_path = _dict(volume, "hostPath")
    if host_path is not None:
        _default(host_path, "type", "")
    downward = _dict(volume, "downwardAPI")
    for item in _dicts(downward.get("items")) if downward is not None else []:
        ref = _dict(item, "fieldRef")
        if ref is not None:
            _default(ref, "apiVersion", "v1")


def _tolerates(tolerations: list[dict[str, Any]], taint: str) -> bool:
    return any(t.get("key", "") in (taint, "") and t.get("effect", "") in (NO_EXECUTE, "") for t in tolerations)


def set_pod_defaults(pod: dict[str, Any]) -> None:
    """Fill in what kube-apiserver fills in on a pod's create or update; what is set stays as it is."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    _default(spec, "dnsPolicy", "ClusterFirst")
    _default(spec, "restartPolicy", "Always")
    _default(spec, "securityContext", {})
    _default(spec, "terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_SECONDS)
    _default(spec, "schedulerName", DEFAULT_SCHEDULER_NAME)
    _default(spec, "enableServiceLinks", True)
    host_network = spec.get("hostNetwork") is True
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in _dicts(spec.get(key)):
            _container(container, host_network)
    for volume in _dicts(spec.get("volumes")):
        _volume(volume)
    # The ServiceAccount plugin's name, which the v1 conversion repeats in the deprecated field.
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    # The DefaultTolerationSeconds plugin: five minutes on a not-ready or unreachable node before eviction.
    tolerations = _dicts(spec.get("tolerations"))
    added = [
        {"key": taint, "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}
        for taint in (NOT_READY_TAINT, UNREACHABLE_TAINT)
        if not _tolerates(tolerations, taint)
    ]
    if added:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *added]
