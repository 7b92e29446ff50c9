"""The images in PYKUBEVIRT_IMAGES_DIR: unpacked with umoci, their entrypoints and tools run in a chroot of each.

`unshare -m -p -f --mount-proc` gives the chroot its own /proc and PID namespace, as a container would; no
container runtime is needed (podman runs here only with runc and explicit ulimits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

IMAGES_DIR = Path(os.environ["PYKUBEVIRT_IMAGES_DIR"])
SUMMARY: dict[str, Any] = json.loads((IMAGES_DIR / "images.json").read_text())
ENTRIES = {entry["name"]: entry for entry in SUMMARY["images"]}


@pytest.fixture(scope="module", params=sorted(ENTRIES))
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The image's summary entry, its runtime config and its root filesystem, unpacked from the OCI layout."""
    entry = ENTRIES[request.param]
    bundle = tmp_path_factory.mktemp(entry["name"]) / "bundle"
    layout = IMAGES_DIR / entry["oci_layout"]
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{entry['tags'][0]}", str(bundle)], check=True)
    config = json.loads((bundle / "config.json").read_text())
    yield {**entry, "root": bundle / "rootfs", "process": config["process"]}
    shutil.rmtree(bundle)


def in_image(image: dict[str, Any], argv: list[str], user: str = "0:0") -> subprocess.CompletedProcess[str]:
    root = image["root"]
    command = ["unshare", "-m", "-p", "-f", f"--mount-proc={root}/proc", "chroot", f"--userspec={user}", str(root)]
    return subprocess.run(
        [*command, "env", "-i", *image["process"]["env"], *argv], capture_output=True, text=True, timeout=60
    )


def test_the_default_process_prints_the_usage(image: dict[str, Any]) -> None:
    result = in_image(image, image["process"]["args"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: pykubevirt")


def test_the_default_process_runs_as_the_non_root_user_deploy_gives_it(image: dict[str, Any]) -> None:
    # deploy/ runs virt-api and virt-controller as uid 107, KubeVirt's non-root launcher runs as 107 too.
    result = in_image(image, image["process"]["args"], user="107:107")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: pykubevirt")


def test_every_entrypoint_and_tool_runs(image: dict[str, Any]) -> None:
    assert image["checks"]
    for check in image["checks"]:
        result = in_image(image, check)
        assert result.returncode == 0, f"{check}: {result.stderr}"
        if check[0] == "pykubevirt":
            assert result.stdout.startswith(f"usage: pykubevirt {check[1]}"), check


def test_the_image_holds_no_docs_package_lists_or_debs(image: dict[str, Any]) -> None:
    root = image["root"]
    docs = [p for p in (root / "usr/share/doc").rglob("*") if p.is_file() and p.name != "copyright"]
    assert docs == []
    assert [p for p in (root / "usr/share/man").rglob("*") if not p.is_dir()] == []
    assert list((root / "var/lib/apt/lists").iterdir()) == []
    assert list((root / "var/cache/apt/archives").glob("*.deb")) == []


def test_the_oci_layout_names_one_manifest_under_every_tag(image: dict[str, Any]) -> None:
    index = json.loads((IMAGES_DIR / image["oci_layout"] / "index.json").read_text())
    names = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    assert sorted(names) == sorted(image["tags"])
    assert set(names.values()) == {image["manifest_digest"]}
    assert image["tags"][0] == SUMMARY["tag"] and SUMMARY["tag"].startswith("git-" + SUMMARY["commit"][:12])


def test_the_docker_archive_carries_every_reference_and_the_commit(image: dict[str, Any]) -> None:
    with tarfile.open(IMAGES_DIR / image["docker_archive"]) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(archive.extractfile(manifest["Config"]))  # type: ignore[arg-type]
    assert sorted(manifest["RepoTags"]) == sorted(image["archive_references"])
    assert len(manifest["Layers"]) == image["layers"] == 2
    assert config["config"]["Labels"]["org.opencontainers.image.revision"] == SUMMARY["commit"]
    assert config["config"]["Entrypoint"] + config["config"]["Cmd"] == image["process"]["args"]
