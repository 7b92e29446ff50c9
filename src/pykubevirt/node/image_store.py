"""The node's containerDisk image store: one disk file per image reference, imported locally or pulled with skopeo.

Layout under `root`: `blobs/sha256-<hex>.<ext>` (disk files, named by their content digest) and `index.json`
(normalized reference → blob), rewritten atomically under an flock so several processes can share the store.
Pulling copies the image into a temporary OCI layout (`skopeo copy docker://REF oci:DIR:img`), replays its layers
and keeps the one file the image has under `/disk`, as KubeVirt's container-disk rules demand. A kernel-boot image is
kept as its files instead (`files`: image path → blob, see image_trees.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.launcher.containerdisk_layout import (
    NO_DISK_MESSAGE,
    DiskImageError,
    disk_entry,
    read_oci_layers,
    replay_layers,
)
from pykubevirt.node import image_trees

DEFAULT_PULL_TIMEOUT_SECONDS = 900.0

PULL_ALWAYS = "Always"
PULL_IF_NOT_PRESENT = "IfNotPresent"
PULL_NEVER = "Never"

# Reasons the kubelet gives a container waiting on its image.
REASON_ERR_IMAGE_PULL = "ErrImagePull"
REASON_NEVER_PULL = "ErrImageNeverPull"
REASON_INVALID_NAME = "InvalidImageName"

SOURCE_IMPORT = "import"
SOURCE_PULL = "pull"

_DEFAULT_DOMAIN = "docker.io"
_LEGACY_DOMAIN = "index.docker.io"
_OFFICIAL_PREFIX = "library/"
# distribution/reference's grammar.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE_RE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_EXT_RE = re.compile(r"^[a-z0-9]{1,10}$")
_OCI_TAG = "img"


class ImagePullError(Exception):
    """The image is not present and cannot be pulled; `reason` is what the kubelet would report (ErrImagePull…)."""

    def __init__(self, message: str, reason: str = REASON_ERR_IMAGE_PULL) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def normalize_reference(ref: str) -> str:
    """Docker's normalized name: `fedora` → `docker.io/library/fedora:latest`; raises ValueError when invalid."""
    match = _REFERENCE_RE.match(ref)
    if match is None or len(match.group("name")) > 255:
        raise ValueError(f'couldn\'t parse image name "{ref}": invalid reference format')
    name, tag, digest = match.group("name"), match.group("tag"), match.group("digest")
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost" and first.lower() == first):
        domain, remainder = _DEFAULT_DOMAIN, name
    else:
        domain, remainder = first, rest
    if domain == _LEGACY_DOMAIN:
        domain = _DEFAULT_DOMAIN
    if domain == _DEFAULT_DOMAIN and "/" not in remainder:
        remainder = _OFFICIAL_PREFIX + remainder
    normalized = f"{domain}/{remainder}"
    if tag:
        normalized += f":{tag}"
    elif not digest:
        normalized += ":latest"
    if digest:
        normalized += f"@{digest}"
    return normalized


@dataclass(frozen=True, slots=True)
class ImageEntry:
    """One index entry: the disk blob a reference resolves to."""

    ref: str
    digest: str
    blob: str
    size: int
    source: str
    file: str
    remote_digest: str = ""
    files: dict[str, str] = field(default_factory=dict)


def _disk_ext(filename: str) -> str:
    ext = Path(filename).suffix.lstrip(".").lower()
    return ext if _EXT_RE.match(ext) else "img"


def _copy_hashing(source: IO[bytes], target: IO[bytes]) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(1 << 20):
        digest.update(chunk)
        target.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _condense(stderr: str) -> str:
    """skopeo's error as one line: the `msg="…"` of its fatal log line when there is one."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        match = re.search(r'msg="((?:[^"\\]|\\.)*)"', line)
        if match:
            try:
                text = str(json.loads(f'"{match.group(1)}"'))
            except ValueError:
                text = match.group(1)
            return " ".join(text.split())
    return " ".join(" ".join(lines).split()) or "unknown error"


class ImageStore:
    """The containerDisk images of one node, under `root`."""

    def __init__(
        self, root: Path, *, skopeo: str = "skopeo", pull_timeout: float = DEFAULT_PULL_TIMEOUT_SECONDS
    ) -> None:
        self.root = Path(root)
        self.skopeo = skopeo
        self.pull_timeout = pull_timeout
        self.blobs = self.root / "blobs"
        self.trees = self.root / "trees"
        self.index_path = self.root / "index.json"
        self._lock_path = self.root / "index.lock"
        self._pulls: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------------------------------------ index

    def _prepare(self) -> None:
        self.blobs.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive flock on index.lock: read-modify-write of the index by several processes stays consistent."""
        self._prepare()
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read_index(self) -> dict[str, Any]:
        try:
            data = json.loads(self.index_path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        images = data.get("images") if isinstance(data, dict) else None
        return images if isinstance(images, dict) else {}

    def _write_index(self, images: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".index.", suffix=".json")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump({"version": 1, "images": images}, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.index_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _record(
        self,
        ref: str,
        digest: str,
        blob: Path | None,
        size: int,
        source: str,
        filename: str,
        remote_digest: str = "",
        files: Mapping[str, str] | None = None,
    ) -> None:
        with self._locked():
            images = self._read_index()
            previous = images.get(ref)
            record = {
                "digest": digest,
                "blob": blob.name if blob is not None else "",
                "size": size,
                "source": source,
                "file": filename,
                "remoteDigest": remote_digest,
                "created": now_rfc3339(),
            }
            if files is not None:
                record["files"] = dict(files)
            if isinstance(previous, dict) and source == SOURCE_PULL and previous.get("remoteDigest") == remote_digest:
                # The same pulled image, used both as a disk and as a file tree: each pull keeps what the other kept.
                for key in ("blob", "file", "files"):
                    if not record.get(key) and previous.get(key):
                        record[key] = previous[key]
            images[ref] = record
            self._write_index(images)

    def _store_stream(self, source: IO[bytes], filename: str) -> tuple[str, Path, int]:
        """Copy a disk into the blobs directory under its digest; returns (digest, blob path, size)."""
        self._prepare()
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".incoming.")
        try:
            with os.fdopen(fd, "wb") as target:
                hexdigest, size = _copy_hashing(source, target)
                target.flush()
                os.fsync(target.fileno())
            blob = self.blobs / f"sha256-{hexdigest}.{_disk_ext(filename)}"
            os.chmod(tmp, 0o644)
            os.replace(tmp, blob)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return f"sha256:{hexdigest}", blob, size

    def entry(self, ref: str) -> ImageEntry | None:
        """The index entry of a reference (normalized first), or None."""
        try:
            key = normalize_reference(ref)
        except ValueError:
            return None
        raw = self._read_index().get(key)
        if not isinstance(raw, dict):
            return None
        return ImageEntry(
            key,
            str(raw.get("digest", "")),
            str(raw.get("blob", "")),
            int(raw.get("size", 0)),
            str(raw.get("source", "")),
            str(raw.get("file", "")),
            str(raw.get("remoteDigest", "")),
            {str(k): str(v) for k, v in (raw.get("files") or {}).items()},
        )

    # ------------------------------------------------------------------------------------------------ public API

    def import_file(self, ref: str, path: Path) -> str:
        """Store a local disk file as the image `ref`; returns its digest (`sha256:<hex>`)."""
        try:
            key = normalize_reference(ref)
        except ValueError as exc:
            raise ImagePullError(str(exc), REASON_INVALID_NAME) from exc
        path = Path(path)
        with path.open("rb") as source:
            digest, blob, size = self._store_stream(source, path.name)
        self._record(key, digest, blob, size, SOURCE_IMPORT, path.name)
        return digest

    def import_files(self, ref: str, files: Mapping[str, Path]) -> str:
        """Store local files at paths of an image `ref` (`FROM scratch` + `COPY`: a kernel-boot image's kernel and
        initrd); returns the image's digest, over its paths and contents."""
        try:
            key = normalize_reference(ref)
            cleaned = {image_trees.clean_image_path(p): Path(f) for p, f in files.items()}
        except ValueError as exc:
            raise ImagePullError(str(exc), REASON_INVALID_NAME) from exc
        stored: dict[str, str] = {}
        total = 0
        for image_path, path in sorted(cleaned.items()):
            with path.open("rb") as source:
                _, blob, size = self._store_stream(source, path.name)
            stored[image_path] = blob.name
            total += size
        digest = image_trees.tree_digest(stored)
        self._record(key, digest, None, total, SOURCE_IMPORT, "", files=stored)
        return digest

    def lookup(self, ref: str, *, tree: bool = False) -> Path | None:
        """The disk file of `ref` (with `tree`, its root filesystem directory) when the store has it."""
        entry = self.entry(ref)
        if entry is None:
            return None
        if tree:
            if not entry.files or not all((self.blobs / b).is_file() for b in entry.files.values()):
                return None
            return image_trees.materialize(self.trees, self.blobs, entry.files)
        blob = self.blobs / entry.blob
        return blob if entry.blob and blob.is_file() else None

    def images(self) -> list[tuple[str, str, int]]:
        """(reference, digest, size) of every stored image, sorted by reference."""
        images = self._read_index()
        return sorted(
            (str(ref), str(raw.get("digest", "")), int(raw.get("size", 0)))
            for ref, raw in images.items()
            if isinstance(raw, dict)
        )

    def remove(self, ref: str) -> bool:
        """Forget `ref`; its blob goes too when no other reference uses it (callers check no VM still uses it)."""
        try:
            key = normalize_reference(ref)
        except ValueError:
            return False
        with self._locked():
            images = self._read_index()
            raw = images.pop(key, None)
            if not isinstance(raw, dict):
                return False
            self._write_index(images)
            used = {str(v.get("blob", "")) for v in images.values() if isinstance(v, dict)}
            used |= {str(b) for v in images.values() if isinstance(v, dict) for b in (v.get("files") or {}).values()}
            for blob in {str(raw.get("blob", "")), *(str(b) for b in (raw.get("files") or {}).values())} - used:
                if blob:
                    with contextlib.suppress(FileNotFoundError):
                        (self.blobs / blob).unlink()
        return True

    async def ensure(
        self,
        ref: str,
        pull_policy: str,
        *,
        source: str | None = None,
        auth_file: Path | None = None,
        tree: bool = False,
    ) -> Path:
        """The disk file of `ref` (with `tree`, its root filesystem directory), pulled as the kubelet would under
        `pull_policy`; `source` overrides the skopeo source (default `docker://<normalized ref>`), `auth_file` holds
        registry credentials."""
        try:
            key = normalize_reference(ref)
        except ValueError as exc:
            raise ImagePullError(f'Failed to apply default image tag "{ref}": {exc}', REASON_INVALID_NAME) from exc
        policy = pull_policy or (PULL_ALWAYS if key.endswith(":latest") else PULL_IF_NOT_PRESENT)
        local = self.lookup(key, tree=tree)
        entry = self.entry(key)
        if local is not None:
            # Imported images exist nowhere else: they are authoritative, even under Always.
            if policy != PULL_ALWAYS or (entry is not None and entry.source == SOURCE_IMPORT):
                return local
        elif entry is not None and entry.source == SOURCE_IMPORT and not tree:
            raise ImagePullError(f'Failed to pull image "{ref}": {NO_DISK_MESSAGE}')
        if policy == PULL_NEVER:
            raise ImagePullError(f'Container image "{ref}" is not present with pull policy of Never', REASON_NEVER_PULL)
        source = source or f"docker://{key}"
        lock = self._pulls.setdefault(key, asyncio.Lock())
        async with lock:
            local = self.lookup(key, tree=tree)
            if local is not None and policy != PULL_ALWAYS:
                return local  # another caller pulled it while we waited
            remote = await self._remote_digest(ref, source, auth_file)
            entry = self.entry(key)
            if local is not None and entry is not None and entry.remote_digest == remote:
                # Always with an unchanged image: like the kubelet, nothing to download.
                return local
            return await self._pull(ref, key, source, auth_file, remote, tree)

    # ------------------------------------------------------------------------------------------------ pulling

    def _skopeo_command(self, *args: str, auth_file: Path | None = None) -> list[str]:
        command = [self.skopeo]
        policies = (Path.home() / ".config/containers/policy.json", Path("/etc/containers/policy.json"))
        if not any(p.exists() for p in policies):
            # containerd pulls without a signature policy; skopeo refuses to without one unless told.
            command.append("--insecure-policy")
        command.append(args[0])
        if auth_file is not None:
            command += ["--authfile" if args[0] == "inspect" else "--src-authfile", str(auth_file)]
        return [*command, *args[1:]]

    async def _skopeo(self, ref: str, *args: str, auth_file: Path | None = None) -> str:
        """Run skopeo; its stdout, or ImagePullError with its error on one line."""
        command = self._skopeo_command(*args, auth_file=auth_file)
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ImagePullError(f'Failed to pull image "{ref}": cannot run {self.skopeo}: {exc}') from exc
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), self.pull_timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise ImagePullError(f'Failed to pull image "{ref}": timed out after {self.pull_timeout:g}s') from None
        except asyncio.CancelledError:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            raise ImagePullError(f'Failed to pull image "{ref}": {_condense(stderr.decode("utf-8", "replace"))}')
        return stdout.decode("utf-8", "replace")

    async def _remote_digest(self, ref: str, source: str, auth_file: Path | None) -> str:
        """The digest of the image's manifest at its source (what changes when the tag moves)."""
        output = await self._skopeo(ref, "inspect", "--raw", source, auth_file=auth_file)
        return "sha256:" + hashlib.sha256(output.encode()).hexdigest()

    async def _pull(
        self, ref: str, key: str, source: str, auth_file: Path | None, remote: str, tree: bool = False
    ) -> Path:
        self._prepare()
        workdir = Path(tempfile.mkdtemp(dir=self.root, prefix=".pull-"))
        try:
            layout = workdir / "oci"
            await self._skopeo(ref, "copy", "--quiet", source, f"oci:{layout}:{_OCI_TAG}", auth_file=auth_file)
            if tree:
                return await asyncio.to_thread(self._extract_tree, ref, key, layout, remote)
            digest, blob, size, filename = await asyncio.to_thread(self._extract, ref, layout)
            await asyncio.to_thread(self._record, key, digest, blob, size, SOURCE_PULL, filename, remote)
            return blob
        finally:
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    def _extract_tree(self, ref: str, key: str, layout: Path, remote: str) -> Path:
        """Store every file of the OCI image at `layout` and record them as `key`'s tree; returns its directory."""
        try:
            files, size = image_trees.extract_tree(layout, _OCI_TAG, self.blobs, self._store_stream)
        except DiskImageError as exc:
            raise ImagePullError(f'Failed to pull image "{ref}": {exc}') from exc
        self._record(key, image_trees.tree_digest(files), None, size, SOURCE_PULL, "", remote, files)
        return image_trees.materialize(self.trees, self.blobs, files)

    def _extract(self, ref: str, layout: Path) -> tuple[str, Path, int, str]:
        """Store the single file under /disk of the OCI image at `layout`; returns (digest, blob, size, name)."""
        self._prepare()
        # path in the image → (layer, member, temporary blob, hex digest, size), hashed while its layer streams by.
        staged: dict[str, tuple[Path, str, Path, str, int]] = {}

        def stage(path: str, layer: Path, member: str, data: IO[bytes]) -> None:
            fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".incoming.")
            try:
                with os.fdopen(fd, "wb") as out:
                    hexdigest, size = _copy_hashing(data, out)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            previous = staged.get(path)
            if previous is not None:
                previous[2].unlink(missing_ok=True)
            staged[path] = (layer, member, Path(tmp), hexdigest, size)

        try:
            try:
                entries = replay_layers(read_oci_layers(layout, _OCI_TAG), stage)
                path, layer, member = disk_entry(entries)
            except DiskImageError as exc:
                raise ImagePullError(f'Failed to pull image "{ref}": {exc}') from exc
            name = posixpath.basename(path)
            hit = staged.get(path)
            if hit is not None and (hit[0], hit[1]) == (layer, member):
                _, _, tmp, hexdigest, size = hit
                blob = self.blobs / f"sha256-{hexdigest}.{_disk_ext(name)}"
                os.chmod(tmp, 0o644)
                os.replace(tmp, blob)
                return f"sha256:{hexdigest}", blob, size, name
            # A link to a file elsewhere in the image: read that file from its layer.
            with tarfile.open(layer, mode="r:*") as archive:
                handle = archive.extractfile(member)
                if handle is None:
                    raise ImagePullError(f'Failed to pull image "{ref}": {NO_DISK_MESSAGE}')
                with handle:
                    digest, blob, size = self._store_stream(handle, name)
            return digest, blob, size, name
        finally:
            for _, _, tmp, _, _ in staged.values():
                tmp.unlink(missing_ok=True)
