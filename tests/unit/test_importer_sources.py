"""The importer's http and registry sources on their own (`import_volume` with CDI's environment): against a
loopback HTTP server, the compressed and archived layouts CDI unwraps, extra headers and basic credentials, the raw
size check; containerDisk images through the real skopeo (oci-archive) and from a node's shared directory."""

from __future__ import annotations

import base64
import gzip
import http.server
import io
import json
import lzma
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api.quantity import MI
from pykubevirt.storage.importer import ImporterError, import_volume
from pykubevirt.virtctl.image_upload import Progress
from tests.unit.test_image_store import oci_image

PAYLOAD = bytes(range(256)) * 4096 * 3  # 3 MiB


@pytest.fixture(scope="module")
def files() -> Iterator[tuple[str, dict[str, bytes], list[dict[str, str]]]]:
    """(base URL, path → body, the headers of each request)."""
    bodies: dict[str, bytes] = {}
    seen: list[dict[str, str]] = []

    class Handle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers.items()))
            body = bodies.get(self.path.lstrip("/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", bodies, seen
    httpd.shutdown()
    httpd.server_close()


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def qcow2_of(tmp: Path, data: bytes) -> bytes:
    raw, qcow2 = tmp / "src.raw", tmp / "src.qcow2"
    raw.write_bytes(data)
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    return qcow2.read_bytes()


def environ(data_dir: Path, url: str, size: str = "16Mi", **extra: str) -> dict[str, str]:
    return {
        "PYKUBEVIRT_MOUNTS": json.dumps({"/data": str(data_dir)}),
        "IMPORTER_SOURCE": "http",
        "IMPORTER_ENDPOINT": url,
        "IMPORTER_IMAGE_SIZE": size,
        "FILESYSTEM_OVERHEAD": "0.06",
        "OWNER_UID": "uid-1",
        **extra,
    }


@pytest.mark.parametrize("layout", ["raw", "iso", "qcow2", "qcow2.gz", "raw.xz", "qcow2.tar", "raw.tar.gz"])
def test_each_layout_becomes_the_same_raw_disk(
    layout: str, files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    body = qcow2_of(tmp_path, PAYLOAD) if layout.startswith("qcow2") else PAYLOAD
    for wrapper in layout.split(".")[1:]:
        body = {"gz": gzip.compress, "xz": lzma.compress, "tar": lambda b: tar_of("disk.img", b)}[wrapper](body)
    bodies[f"{tmp_path.name}/{layout}"] = body
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(environ(data, f"{base}/{tmp_path.name}/{layout}")) == "Import Complete"
    assert sorted(p.name for p in data.iterdir()) == ["disk.img"]
    disk = data / "disk.img"
    with disk.open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD
    # 16Mi less CDI's 6 % overhead, rounded down to 1 MiB.
    assert disk.stat().st_size == 15 * MI


def test_extra_headers_and_basic_credentials_are_sent(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, seen = files
    bodies["auth.img"] = PAYLOAD
    data = tmp_path / "data"
    data.mkdir()
    env = environ(
        data,
        f"{base}/auth.img",
        IMPORTER_EXTRA_HEADER_0="X-First: one",
        IMPORTER_ACCESS_KEY_ID="user",
        IMPORTER_SECRET_KEY="secret",
    )
    import_volume(env)
    assert seen[-1]["X-First"] == "one"
    assert seen[-1]["Authorization"] == "Basic " + base64.b64encode(b"user:secret").decode()


def test_a_raw_image_larger_than_the_volume_is_refused_and_nothing_is_left(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    bodies["big.img"] = PAYLOAD * 2
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ImporterError) as failure:
        import_volume(environ(data, f"{base}/big.img", size="4Mi"))
    usable = 3 * MI  # 4Mi / 1.06 rounded down to 1 MiB
    assert str(failure.value) == (
        f"virtual image size {6 * MI} is larger than the reported available storage {usable}. A larger PVC is required"
    )
    assert list(data.iterdir()) == []


def registry_environ(data_dir: Path, endpoint: str, shared: Path | None = None) -> dict[str, str]:
    mounts = {"/data": str(data_dir), **({"/shared": str(shared)} if shared else {})}
    return {**environ(data_dir, endpoint), "IMPORTER_SOURCE": "registry", "PYKUBEVIRT_MOUNTS": json.dumps(mounts)}


def test_a_registry_image_is_pulled_with_skopeo_and_its_disk_converted(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    qcow2 = qcow2_of(tmp_path, PAYLOAD)
    oci_image(layout, "v1", [("disk/", None, ""), ("disk/rhel.qcow2", qcow2, "")])
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as out:
        for child in sorted(layout.iterdir()):
            out.add(child, arcname=child.name)
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(registry_environ(data, f"oci-archive://{archive}")) == "Import Complete"
    assert sorted(p.name for p in data.iterdir()) == ["disk.img"]
    with (data / "disk.img").open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD


def test_a_registry_image_without_a_disk_is_refused_with_kubevirts_message(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    oci_image(layout, "v1", [("etc/", None, ""), ("etc/motd", b"hello", "")])
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as out:
        for child in sorted(layout.iterdir()):
            out.add(child, arcname=child.name)
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ImporterError, match="no file found in folder /disk, no disk present"):
        import_volume(registry_environ(data, f"oci-archive://{archive}"))
    assert list(data.iterdir()) == []


def test_a_node_pulled_image_is_read_from_the_shared_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    blob = tmp_path / "blob.qcow2"
    blob.write_bytes(qcow2_of(tmp_path, PAYLOAD))
    (shared / "disk.img").symlink_to(blob)
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(registry_environ(data, "docker://pykubevirt.local/x:1", shared)) == "Import Complete"
    with (data / "disk.img").open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_virtctl_upload_progress_is_a_bar_on_a_terminal_and_lines_otherwise() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for out in (terminal, pipe):
        progress = Progress(4 * MI, out)
        for sent in range(MI // 2, 4 * MI + 1, MI // 2):
            progress.update(sent)
        progress.finish()
    assert terminal.getvalue().startswith("\r 512.00 KiB / 4.00 MiB [")
    assert (
        terminal.getvalue()
        .rstrip("\n")
        .rsplit("\r", 1)[1]
        .startswith(" 4.00 MiB / 4.00 MiB [" + "=" * 40 + "] 100.00%")
    )
    assert pipe.getvalue().splitlines() == [
        f"{size} / 4.00 MiB ({percent}%)"
        for size, percent in (
            ("512.00 KiB", 12), ("1.00 MiB", 25), ("1.50 MiB", 38), ("2.00 MiB", 50),
            ("2.50 MiB", 62), ("3.00 MiB", 75), ("3.50 MiB", 88), ("4.00 MiB", 100),
        )
    ]  # fmt: skip
