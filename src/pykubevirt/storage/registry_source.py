"""The importer's `registry` source, after CDI's `pkg/importer/registry-datasource.go`: a containerDisk image's one
file under `/disk`.

`pullMethod: pod` copies the image with skopeo (`docker://` or `oci-archive://`) into a scratch OCI layout and
replays its layers; `pullMethod: node` (and every `pykubevirt.local/...` image, which exists only in the nodes'
image stores) gets the disk from the node: the pod's `server` sidecar is a containerDisk container that links the
image's disk file into the shared directory, as the launcher's containerDisk containers do.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

from pykubevirt.launcher.containerdisk_layout import DiskImageError, disk_entry, read_oci_layers, replay_layers

SHARED_DIR = "/shared"
SCHEMES = ("docker://", "oci-archive://")
_TAG = "img"


class RegistryError(Exception):
    """The image cannot be read; the message is the importer's failure reason."""


def node_disk(shared: Path) -> Path:
    """The disk file the node's containerDisk sidecar linked into the shared directory."""
    files = sorted(p for p in shared.iterdir() if p.name.endswith(".img"))
    if not files:
        raise RegistryError("no disk was linked into the shared directory by the image's server container")
    return files[0].resolve()


def _skopeo_args(environ: Mapping[str, str], mounts: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    user, password = environ.get("IMPORTER_ACCESS_KEY_ID", ""), environ.get("IMPORTER_SECRET_KEY", "")
    if user or password:
        args += ["--src-creds", f"{user}:{password}"]
    if environ.get("INSECURE_TLS", "").lower() == "true":
        args.append("--src-tls-verify=false")
    if "/certs" in mounts:
        args += ["--src-cert-dir", mounts["/certs"]]
    return args


def pull_disk(endpoint: str, environ: Mapping[str, str], mounts: Mapping[str, str], scratch: Path) -> Path:
    """Copy the image with skopeo into `scratch` and extract its disk file there; returns the file."""
    if not endpoint.startswith(SCHEMES):
        raise RegistryError(f"unsupported registry endpoint {endpoint!r}: docker:// or oci-archive:// only")
    source = endpoint.replace("oci-archive://", "oci-archive:", 1)
    layout = scratch / "oci"
    argv = ["skopeo", "--insecure-policy", "copy", "--quiet", *_skopeo_args(environ, mounts)]
    result = subprocess.run([*argv, source, f"oci:{layout}:{_TAG}"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RegistryError(f"Failed to read registry image: {' '.join(result.stderr.split())}")
    try:
        path, layer, member = disk_entry(replay_layers(read_oci_layers(layout, _TAG)))
    except DiskImageError as exc:
        raise RegistryError(str(exc)) from exc
    disk = scratch / Path(path).name
    with tarfile.open(layer, mode="r:*") as archive:
        handle = archive.extractfile(member)
        if handle is None:
            raise RegistryError(f"cannot read {path} from the image")
        with handle, open(disk, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)
    shutil.rmtree(layout, ignore_errors=True)
    return disk
