"""`python -m pykubevirt.images.build`: build both images into an output directory (what `make images` runs).

Each image is the cached base layer plus one layer of its own (umoci unpack, install in a chroot, umoci repack),
written as an OCI layout (`NAME.oci`, one entry per tag) and a docker-archive (`NAME.tar`) carrying every tag, and
described in `images.json`. Times come from the commit, so one commit built twice gives the same tags and configs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt import __version__
from pykubevirt.images import rootfs, spec
from pykubevirt.images.rootfs import run

HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
SUMMARY = "images.json"


@dataclass(frozen=True, slots=True)
class Revision:
    """The commit the images are built from, and its time (every timestamp in the images)."""

    commit: str
    epoch: int
    dirty: bool

    @classmethod
    def of(cls, repo: Path) -> Revision:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

        # Build outputs and caches are not the sources; anything else uncommitted makes the tag say -dirty.
        changes = git("status", "--porcelain", "--untracked-files=no")
        return cls(git("rev-parse", "HEAD").strip(), int(git("log", "-1", "--format=%ct").strip()), bool(changes))


def build_wheels(repo: Path, wheels: Path) -> None:
    """pykubevirt's wheel, its dependencies' wheels and pip's own, from the host's configured package index."""
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("pykubevirt-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(repo), "pip"])


def build_image(image: spec.ImageSpec, *, layout: Path, work: Path, cache: Path, rev: Revision, update: bool) -> None:
    """Unpack the base into a bundle, install the image's contents in it and repack it as tag `image.name`."""
    bundle = work / image.name
    if bundle.exists():
        shutil.rmtree(bundle)
    run(["umoci", "unpack", "--image", f"{layout}:base", str(bundle)])
    root = bundle / "rootfs"
    for path, content in image.files:
        target = root / path.lstrip("/")
        target.write_text(content)
        target.chmod(0o755)
    script = spec.install_script(image, epoch=rev.epoch, update=update)
    rootfs.chroot(root, script, cache=cache, binds={cache / "wheels": "/tmp/wheels"})
    rootfs.remove_volatile(root)
    rootfs.clamp_mtimes(root, rev.epoch)
    created = spec.timestamp(rev.epoch)
    what = f"apt-get install {' '.join(image.packages)}; pip install pykubevirt=={__version__}"
    tag = f"{layout}:{image.name}"
    run(["umoci", "repack", "--image", tag, "--history.created", created, "--history.created_by", what, str(bundle)])
    run(["umoci", "config", "--image", tag, *spec.config_args(image, commit=rev.commit, epoch=rev.epoch)])
    shutil.rmtree(bundle)


def base_image(layout: Path, base: Path, rev: Revision) -> None:
    """A fresh working layout whose `base` tag is the base root as one layer."""
    if layout.exists():
        shutil.rmtree(layout)
    created = spec.timestamp(rev.epoch)
    run(["umoci", "init", "--layout", str(layout)])
    run(["umoci", "new", "--image", f"{layout}:base"])
    history = ["--history.created", created, "--history.created_by", f"debootstrap --variant=minbase {spec.SUITE}"]
    run(["umoci", "insert", "--image", f"{layout}:base", *history, str(base), "/"])
    platform = ["--architecture", "amd64", "--os", "linux"]
    run(["umoci", "config", "--image", f"{layout}:base", "--created", created, "--no-history", *platform])


def export(image: spec.ImageSpec, *, layout: Path, out: Path, tags: tuple[str, ...]) -> dict[str, Any]:
    """Write the image's OCI layout (every tag) and docker-archive (every tag); describe what was written."""
    oci = out / f"{image.name}.oci"
    archive = out / f"{image.name}.tar"
    if oci.exists():
        shutil.rmtree(oci)
    archive.unlink(missing_ok=True)
    for tag in tags:
        run(["skopeo", "copy", "-q", f"oci:{layout}:{image.name}", f"oci:{oci}:{tag}"])
    extra = [arg for tag in tags[1:] for arg in ("--additional-tag", image.reference(tag))]
    destination = f"docker-archive:{archive}:{image.reference(tags[0])}"
    run(["skopeo", "copy", "-q", *extra, f"oci:{oci}:{tags[0]}", destination])
    index = json.loads((oci / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    manifest = json.loads((oci / "blobs" / digest.replace(":", "/")).read_text())
    return {
        "name": image.name,
        "references": [image.reference(tag) for tag in tags],
        "archive_references": [image.normalized_reference(tag) for tag in tags],
        "tags": list(tags),
        "oci_layout": oci.name,
        "docker_archive": archive.name,
        "manifest_digest": digest,
        "layers": len(manifest["layers"]),
        "compressed_bytes": sum(layer["size"] for layer in manifest["layers"]),
        "archive_bytes": archive.stat().st_size,
        "checks": [list(check) for check in image.checks],
    }


def build(repo: Path, out: Path, names: list[str]) -> dict[str, Any]:
    """Build the named images (all by default) into `out`; return the summary written to images.json."""
    started = time.monotonic()
    rev = Revision.of(repo)
    tags = spec.image_tags(rev.commit, dirty=rev.dirty)
    cache, work = out / "cache", out / "work"
    work.mkdir(parents=True, exist_ok=True)
    host_sources = HOST_SOURCES.read_text()
    base = rootfs.base_rootfs(cache, host_sources)
    build_wheels(repo, cache / "wheels")
    layout = work / "layout"
    base_image(layout, base, rev)
    chosen = [image for image in spec.IMAGES if not names or image.name in names]
    entries = []
    for position, image in enumerate(chosen):
        begun = time.monotonic()
        # Lists fetched for the first image serve the second (they are the cache's, not the image's).
        build_image(image, layout=layout, work=work, cache=cache, rev=rev, update=position == 0)
        run(["umoci", "gc", "--layout", str(layout)])
        entry = export(image, layout=layout, out=out, tags=tags)
        entry["build_seconds"] = round(time.monotonic() - begun, 1)
        entries.append(entry)
    shutil.rmtree(layout)
    summary = {
        "commit": rev.commit,
        "dirty": rev.dirty,
        "tag": tags[0],
        "created": spec.timestamp(rev.epoch),
        "images": entries,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pykubevirt.images.build", description=__doc__)
    parser.add_argument("--output", required=True, help="directory for the images, images.json and the build cache")
    parser.add_argument("--repo", default=".", help="the git checkout to build (its HEAD names the tags)")
    parser.add_argument("images", nargs="*", help=f"any of {', '.join(i.name for i in spec.IMAGES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.images) - {image.name for image in spec.IMAGES}
    if unknown:
        parser.error(f"no such image: {', '.join(sorted(unknown))}")
    summary = build(Path(args.repo).resolve(), Path(args.output).resolve(), args.images)
    for entry in summary["images"]:
        print(
            f"{entry['references'][0]}: {args.output}/{entry['docker_archive']} {entry['archive_bytes'] / 1e6:.0f} MB"
            f" (gzip layers {entry['compressed_bytes'] / 1e6:.0f} MB), OCI layout {args.output}/{entry['oci_layout']}"
        )
    print(f"images: built in {summary['build_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
