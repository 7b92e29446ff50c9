"""The containerDisk image store: import, lookup, reference normalization, pull policies and OCI extraction.

Pulls run the real skopeo against OCI layouts the tests build by hand (`oci:<dir>:<tag>`), or against a registry
address nothing listens on; nothing needs the network.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import io
import json
import multiprocessing
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.cli import image_command
from pykubevirt.node.image_store import (
    ImagePullError,
    ImageStore,
    disk_entry,
    normalize_reference,
    read_oci_layers,
    replay_layers,
)

DISK = b"QFI\xfb" + bytes(range(256)) * 64


# ---------------------------------------------------------------------------------------------------- OCI builder

Entry = tuple[str, bytes | None, str]  # (path, data or None, symlink/hardlink target or "")


def _layer_tar(entries: list[Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.name = name.rstrip("/")
                archive.addfile(info)
            elif link.startswith("->"):
                info.type = tarfile.SYMTYPE
                info.linkname = link[2:]
                archive.addfile(info)
            elif link.startswith("=>"):
                info.type = tarfile.LNKTYPE
                info.linkname = link[2:]
                archive.addfile(info)
            else:
                payload = data or b""
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _blob(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256"
    path.mkdir(parents=True, exist_ok=True)
    (path / digest).write_bytes(data)
    return f"sha256:{digest}"


def oci_image(layout: Path, tag: str, *layers: list[Entry], compress: bool = True) -> Path:
    """Write (or add a tag to) an OCI image layout whose layers hold the given files."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    descriptors, diff_ids = [], []
    for entries in layers:
        raw = _layer_tar(entries)
        data = gzip.compress(raw) if compress else raw
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        descriptors.append({"mediaType": media, "digest": _blob(layout, data), "size": len(data)})
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(layout, config),
                "size": len(config),
            },
            "layers": descriptors,
        }
    ).encode()
    index_path = layout / "index.json"
    index: dict[str, Any] = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2}
    manifests = [
        m
        for m in index.get("manifests", [])
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
    ]
    manifests.append(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _blob(layout, manifest),
            "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }
    )
    index["manifests"] = manifests
    index_path.write_text(json.dumps(index))
    return layout


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def count_pulls(store: ImageStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wrap the store's real pull: the returned list gets the key of every pull that runs."""
    pulls: list[str] = []
    real_pull = store._pull

    async def counting_pull(ref: str, key: str, *args: Any) -> Path:
        pulls.append(key)
        return await real_pull(ref, key, *args)

    monkeypatch.setattr(store, "_pull", counting_pull)
    return pulls


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images", pull_timeout=30)


@pytest.fixture
def disk_file(tmp_path: Path) -> Path:
    path = tmp_path / "guest.qcow2"
    path.write_bytes(DISK)
    return path


# ---------------------------------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("ref", "normalized"),
    [
        ("fedora", "docker.io/library/fedora:latest"),
        ("fedora:39", "docker.io/library/fedora:39"),
        ("kubevirt/cirros-container-disk-demo", "docker.io/kubevirt/cirros-container-disk-demo:latest"),
        ("docker.io/fedora", "docker.io/library/fedora:latest"),
        ("index.docker.io/library/fedora:1", "docker.io/library/fedora:1"),
        ("quay.io/containerdisks/fedora:latest", "quay.io/containerdisks/fedora:latest"),
        ("quay.io/containerdisks/fedora", "quay.io/containerdisks/fedora:latest"),
        ("localhost/img", "localhost/img:latest"),
        ("localhost:5000/a/b:v1", "localhost:5000/a/b:v1"),
        ("pykubevirt.local/demo-guest:1.0", "pykubevirt.local/demo-guest:1.0"),
        ("registry:5000/x", "registry:5000/x:latest"),
        ("a/b@sha256:" + "a" * 64, "docker.io/a/b@sha256:" + "a" * 64),
        ("a:t@sha256:" + "b" * 64, "docker.io/library/a:t@sha256:" + "b" * 64),
    ],
)
def test_normalize_reference(ref: str, normalized: str) -> None:
    assert normalize_reference(ref) == normalized


@pytest.mark.parametrize("ref", ["", "Fedora", "quay.io/Upper/x", "a::b", "a b", "a/b:", "-x", "a@sha256:zz"])
def test_invalid_references(ref: str) -> None:
    with pytest.raises(ValueError, match="invalid reference format"):
        normalize_reference(ref)


# ---------------------------------------------------------------------------------------------------- import


def test_import_and_lookup(store: ImageStore, disk_file: Path) -> None:
    digest = store.import_file("pykubevirt.local/demo-guest:1.0", disk_file)
    assert digest == sha(DISK)
    path = store.lookup("pykubevirt.local/demo-guest:1.0")
    assert path == store.root / "blobs" / f"sha256-{digest.removeprefix('sha256:')}.qcow2"
    assert path is not None and path.read_bytes() == DISK
    assert store.images() == [("pykubevirt.local/demo-guest:1.0", digest, len(DISK))]
    index = json.loads((store.root / "index.json").read_text())
    assert index["images"]["pykubevirt.local/demo-guest:1.0"]["source"] == "import"
    assert [p.name for p in (store.root / "blobs").iterdir()] == [path.name]  # no temporary files left


def test_lookup_normalizes(store: ImageStore, disk_file: Path) -> None:
    store.import_file("cirros", disk_file)
    assert store.lookup("docker.io/library/cirros:latest") == store.lookup("cirros:latest") == store.lookup("cirros")
    assert store.lookup("cirros:other") is None
    assert store.lookup("Not A Ref") is None
    assert store.images()[0][0] == "docker.io/library/cirros:latest"


def test_reimport_replaces_and_shares_blobs(store: ImageStore, disk_file: Path, tmp_path: Path) -> None:
    store.import_file("a:1", disk_file)
    store.import_file("b:1", disk_file)
    assert store.lookup("a:1") == store.lookup("b:1")
    other = tmp_path / "other.raw"
    other.write_bytes(b"raw disk")
    store.import_file("a:1", other)
    assert store.lookup("a:1") == store.root / "blobs" / f"sha256-{hashlib.sha256(b'raw disk').hexdigest()}.raw"
    assert store.remove("b:1") and store.lookup("b:1") is None
    assert not store.remove("b:1")
    assert len(list((store.root / "blobs").iterdir())) == 1


def test_invalid_reference_on_import(store: ImageStore, disk_file: Path) -> None:
    with pytest.raises(ImagePullError, match="invalid reference format") as caught:
        store.import_file("UPPER", disk_file)
    assert caught.value.reason == "InvalidImageName"


def _import_many(root: str, worker: int, disk: str) -> None:
    store = ImageStore(Path(root))
    for i in range(6):
        store.import_file(f"example.org/w{worker}/img:{i}", Path(disk))


def test_concurrent_imports_from_processes_keep_every_entry(tmp_path: Path, disk_file: Path) -> None:
    root = tmp_path / "shared"
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_import_many, args=(str(root), w, str(disk_file))) for w in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    images = ImageStore(root).images()
    assert len(images) == 36
    assert {digest for _, digest, _ in images} == {sha(DISK)}


# ---------------------------------------------------------------------------------------------------- policies


async def test_local_images_need_no_pull(store: ImageStore, disk_file: Path) -> None:
    store.import_file("pykubevirt.local/demo-guest:1.0", disk_file)
    store.skopeo = "/nonexistent/skopeo"  # any pull attempt would fail
    for policy in ("IfNotPresent", "Never", "Always", ""):
        assert (await store.ensure("pykubevirt.local/demo-guest:1.0", policy)).read_bytes() == DISK
    # Imported images are authoritative, so `:latest` (Always by default) works offline too.
    store.import_file("pykubevirt.local/demo-guest", disk_file)
    assert await store.ensure("pykubevirt.local/demo-guest", "Always") == store.lookup("pykubevirt.local/demo-guest")


async def test_never_and_missing(store: ImageStore) -> None:
    with pytest.raises(ImagePullError) as caught:
        await store.ensure("quay.io/containerdisks/fedora:40", "Never")
    assert (
        str(caught.value)
        == 'Container image "quay.io/containerdisks/fedora:40" is not present with pull policy of Never'
    )
    assert caught.value.reason == "ErrImageNeverPull"


async def test_invalid_reference_on_ensure(store: ImageStore) -> None:
    with pytest.raises(ImagePullError, match=r'^Failed to apply default image tag "Bad:Ref"') as caught:
        await store.ensure("Bad:Ref", "IfNotPresent")
    assert caught.value.reason == "InvalidImageName"


async def test_unreachable_registry_fails_fast_with_one_line(store: ImageStore) -> None:
    started = time.monotonic()
    with pytest.raises(ImagePullError) as caught:
        await store.ensure("localhost:1/nope:1", "IfNotPresent")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert message.startswith('Failed to pull image "localhost:1/nope:1": ')
    assert "\n" not in message and "connection refused" in message
    assert "level=fatal" not in message and "msg=" not in message
    assert caught.value.reason == "ErrImagePull"
    assert store.lookup("localhost:1/nope:1") is None
    assert list(store.root.glob(".pull-*")) == []


async def test_missing_skopeo(store: ImageStore) -> None:
    store.skopeo = "/nonexistent/skopeo"
    with pytest.raises(ImagePullError, match="cannot run /nonexistent/skopeo"):
        await store.ensure("localhost:1/nope:1", "IfNotPresent")


# ---------------------------------------------------------------------------------------------------- OCI pulls


async def test_pull_extracts_the_disk(store: ImageStore, tmp_path: Path) -> None:
    layout = oci_image(tmp_path / "registry", "v1", [("disk/", None, ""), ("disk/fedora.qcow2", DISK, "")])
    path = await store.ensure("example.org/fedora:v1", "IfNotPresent", source=f"oci:{layout}:v1")
    assert path.read_bytes() == DISK
    assert path.name == f"sha256-{hashlib.sha256(DISK).hexdigest()}.qcow2"
    entry = store.entry("example.org/fedora:v1")
    assert entry is not None and entry.source == "pull" and entry.file == "fedora.qcow2"
    assert store.images() == [("example.org/fedora:v1", sha(DISK), len(DISK))]
    leftovers = [p.name for p in store.root.iterdir() if p.name.startswith(".")]
    assert leftovers == [] and [p.name for p in (store.root / "blobs").iterdir()] == [path.name]
    store.skopeo = "/nonexistent/skopeo"
    assert await store.ensure("example.org/fedora:v1", "IfNotPresent") == path


async def test_always_pulls_again_only_when_the_image_changed(
    store: ImageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = oci_image(tmp_path / "registry", "latest", [("disk/d.img", b"one", "")], compress=False)
    source = f"oci:{layout}:latest"
    first = await store.ensure("example.org/d", "Always", source=source)
    assert first.read_bytes() == b"one"
    pulls = count_pulls(store, monkeypatch)
    assert await store.ensure("example.org/d", "Always", source=source) == first
    assert len(pulls) == 0
    oci_image(layout, "latest", [("disk/d.img", b"two", "")], compress=False)
    second = await store.ensure("example.org/d", "", source=source)  # :latest defaults to Always
    assert len(pulls) == 1 and second.read_bytes() == b"two"
    # Always must reach the source: a pulled image is not enough when the source is gone.
    shutil.rmtree(layout)
    with pytest.raises(ImagePullError, match=r'^Failed to pull image "example.org/d": '):
        await store.ensure("example.org/d", "Always", source=source)


async def test_concurrent_ensures_pull_once(store: ImageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = oci_image(tmp_path / "registry", "v1", [("disk/d.img", DISK, "")])
    pulls = count_pulls(store, monkeypatch)
    paths = await asyncio.gather(
        *(store.ensure("example.org/d:v1", "IfNotPresent", source=f"oci:{layout}:v1") for _ in range(5))
    )
    assert len(set(paths)) == 1 and pulls == ["example.org/d:v1"]


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([[("etc/hostname", b"x", "")]], "no file found in folder /disk, no disk present"),
        ([[("disk/", None, "")]], "no file found in folder /disk, no disk present"),
        ([[("disk/a.img", b"a", ""), ("disk/b.img", b"b", "")]], "more than one file found in folder /disk"),
        ([[("disk/a.img", b"a", "")], [("disk/b.img", b"b", "")]], "more than one file found in folder /disk"),
        ([[("disk/a.img", b"a", ""), ("disk/sub/", None, "")]], "more than one file found in folder /disk"),
    ],
)
async def test_disk_rules(store: ImageStore, tmp_path: Path, layers: list[list[Entry]], message: str) -> None:
    layout = oci_image(tmp_path / "registry", "v1", *layers)
    with pytest.raises(ImagePullError) as caught:
        await store.ensure("example.org/bad:v1", "IfNotPresent", source=f"oci:{layout}:v1")
    assert str(caught.value).startswith('Failed to pull image "example.org/bad:v1": ' + message)
    assert store.lookup("example.org/bad:v1") is None
    assert list((store.root / "blobs").iterdir()) == []


async def test_layers_whiteouts_and_links(store: ImageStore, tmp_path: Path) -> None:
    layout = tmp_path / "registry"
    oci_image(
        layout,
        "whiteout",
        [("disk/old.img", b"old", ""), ("disk/older.img", b"older", "")],
        [("disk/.wh.old.img", b"", ""), ("disk/new.img", b"new", "")],
        [("disk/.wh..wh..opq", b"", ""), ("disk/newest.raw", b"newest", "")],
    )
    path = await store.ensure("example.org/w:1", "IfNotPresent", source=f"oci:{layout}:whiteout")
    assert path.read_bytes() == b"newest" and path.suffix == ".raw"
    oci_image(layout, "symlink", [("data/real.qcow2", DISK, ""), ("disk/disk.qcow2", None, "->../data/real.qcow2")])
    path = await store.ensure("example.org/s:1", "IfNotPresent", source=f"oci:{layout}:symlink")
    assert path.read_bytes() == DISK
    oci_image(layout, "hardlink", [("data/real.img", b"linked", ""), ("disk/disk.img", None, "=>data/real.img")])
    path = await store.ensure("example.org/h:1", "IfNotPresent", source=f"oci:{layout}:hardlink")
    assert path.read_bytes() == b"linked"


def test_disk_entry_on_a_layout(tmp_path: Path) -> None:
    layout = oci_image(tmp_path / "layout", "t", [("disk/x.img", b"x", "")], [("etc/motd", b"hi", "")])
    layers = read_oci_layers(layout, "t")
    assert len(layers) == 2
    path, layer, member = disk_entry(replay_layers(layers))
    assert path == "disk/x.img" and layer == layers[0] and member == "disk/x.img"


# ---------------------------------------------------------------------------------------------------- CLI


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    image_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    code: int = args.func(args)
    return code


def test_cli_import_and_list(tmp_path: Path, disk_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = str(tmp_path / "cli-images")
    assert _cli("image", "import", "pykubevirt.local/demo-guest:1.0", str(disk_file), "--images-dir", images) == 0
    assert capsys.readouterr().out == f"pykubevirt.local/demo-guest:1.0 {sha(DISK)}\n"
    assert _cli("image", "list", "--images-dir", images) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["IMAGE", "DIGEST", "SIZE"]
    assert lines[1].split() == ["pykubevirt.local/demo-guest:1.0", hashlib.sha256(DISK).hexdigest()[:12], "16.4kB"]


def test_cli_errors_are_one_line(tmp_path: Path, disk_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = str(tmp_path / "cli-images")
    assert _cli("image", "import", "x:1", str(tmp_path / "missing.img"), "--images-dir", images) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert _cli("image", "import", "Bad:Ref", str(disk_file), "--images-dir", images) == 1
    assert capsys.readouterr().err == 'error: couldn\'t parse image name "Bad:Ref": invalid reference format\n'
