"""ValidatePodSpec's checks of a pod's volume sources, containers' environment variables and probes, with kube's
field paths and messages (`pkg/apis/core/validation/validation.go`, Kubernetes 1.32: relaxed env var names)."""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.object_meta_validation import Cause, forbidden, invalid, required

# validateVolumeSource's order, with the field path each source is reported under when it is not the first
# (kube's own spelling: "cephFS" and "downwarAPI").
_VOLUME_SOURCES = (
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
)
# The field each source must name (a source's own required field), reported as `<source>.<field>: Required value`.
_SOURCE_REQUIRED = {
    "hostPath": "path",
    "secret": "secretName",
    "configMap": "name",
    "persistentVolumeClaim": "claimName",
}
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
_ENV_NAME_MESSAGE = "a valid environment variable name must consist only of printable ASCII characters other than '='"
_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_PROBE_COUNTS = ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold")
_PORT_RANGE = "must be between 1 and 65535, inclusive"


def volume_source_causes(at: str, volume: dict[str, Any]) -> list[Cause]:
    """Exactly one source a volume, and the one field each common source cannot do without."""
    causes: list[Cause] = []
    chosen = ""
    for key, path in _VOLUME_SOURCES:
        if volume.get(key) is None:
            continue
        if chosen:
            causes.append(forbidden(f"{at}.{path}", "may not specify more than 1 volume type"))
            continue
        chosen = key
        needed = _SOURCE_REQUIRED.get(key)
        source = volume[key]
        if needed and isinstance(source, dict) and not source.get(needed):
            causes.append(required(f"{at}.{key}.{needed}", ""))
    if not chosen:
        causes.append(required(at, "must specify a volume type"))
    return causes


def env_causes(at: str, env: Any) -> list[Cause]:
    """ValidateEnv: a name of printable ASCII but '=', and at most one source for a value."""
    causes: list[Cause] = []
    for i, var in enumerate(env if isinstance(env, list) else []):
        if not isinstance(var, dict):
            continue
        path = f"{at}[{i}]"
        name = var.get("name")
        name = name if isinstance(name, str) else ""
        if not name:
            causes.append(required(f"{path}.name", ""))
            causes.append(invalid(f"{path}.name", name, "environment variable name must be non-empty"))
        elif any(not " " <= char <= "~" or char == "=" for char in name):
            causes.append(invalid(f"{path}.name", name, _ENV_NAME_MESSAGE))
        value_from = var.get("valueFrom")
        if not isinstance(value_from, dict):
            continue
        sources = [key for key in _ENV_SOURCES if value_from.get(key) is not None]
        if not sources:
            listed = "`fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
            causes.append(invalid(f"{path}.valueFrom", "", f"must specify one of: {listed}"))
        elif var.get("value"):
            causes.append(invalid(f"{path}.valueFrom", "", "may not be specified when `value` is not empty"))
        elif len(sources) > 1:
            causes.append(invalid(f"{path}.valueFrom", "", "may not have more than one field specified at a time"))
        for key in ("configMapKeyRef", "secretKeyRef"):
            selector = value_from.get(key)
            if isinstance(selector, dict):
                missing = [field for field in ("name", "key") if not selector.get(field)]
                causes += [required(f"{path}.valueFrom.{key}.{field}", "") for field in missing]
    return causes


def container_probe_causes(at: str, container: dict[str, Any], *, init: bool) -> list[Cause]:
    """A container's probes; an init container may have them only as a sidecar (restartPolicy Always)."""
    causes: list[Cause] = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(kind)
        if probe is None:
            continue
        if init and container.get("restartPolicy") != "Always":
            causes.append(forbidden(f"{at}.{kind}", "may not be set for init containers without restartPolicy=Always"))
        else:
            causes += probe_causes(f"{at}.{kind}", probe, kind)
    return causes


def probe_causes(at: str, probe: Any, kind: str) -> list[Cause]:
    """validateProbe: one handler, counts not below zero, and a success threshold of 1 but for readiness."""
    if not isinstance(probe, dict):
        return []
    causes: list[Cause] = []
    for key in _PROBE_COUNTS:
        count = probe.get(key)
        if isinstance(count, int) and count < 0:
            causes.append(invalid(f"{at}.{key}", count, "must be greater than or equal to 0"))
    if kind in ("livenessProbe", "startupProbe") and probe.get("successThreshold") not in (None, 1):
        causes.append(invalid(f"{at}.successThreshold", probe.get("successThreshold"), "must be 1"))
    chosen = ""
    for key in _PROBE_HANDLERS:
        handler = probe.get(key)
        if handler is None:
            continue
        if chosen:
            causes.append(forbidden(f"{at}.{key}", "may not specify more than 1 handler type"))
            continue
        chosen = key
        causes += _handler_causes(f"{at}.{key}", key, handler if isinstance(handler, dict) else {})
    if not chosen:
        causes.append(required(at, "must specify a handler type"))
    return causes


def _handler_causes(at: str, kind: str, handler: dict[str, Any]) -> list[Cause]:
    if kind == "exec":
        return [] if handler.get("command") else [required(f"{at}.command", "")]
    port = handler.get("port")
    if kind == "grpc":
        return [] if isinstance(port, int) and 1 <= port <= 65535 else [invalid(f"{at}.port", port or 0, _PORT_RANGE)]
    if port is None or (isinstance(port, int) and not 1 <= port <= 65535):
        return [invalid(f"{at}.port", port or 0, _PORT_RANGE)]
    return []
