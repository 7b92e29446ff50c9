"""`pykubevirt image import REF FILE|--file PATH=FILE…` and `pykubevirt image list`: the node's local images
(containerDisks, and kernel-boot images holding a kernel and initrd)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pykubevirt.cli.cluster_layout import DEFAULT_IMAGES_DIR


def _size(value: int) -> str:
    """Sizes as `docker images` prints them (decimal units, three significant digits)."""
    amount = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if amount < 1000 or unit == "TB":
            return f"{amount:.3g}{unit}"
        amount /= 1000
    return f"{value}B"


def _import(args: argparse.Namespace) -> int:
    from pykubevirt.node.image_store import ImagePullError, ImageStore, normalize_reference

    store = ImageStore(Path(args.images_dir))
    if bool(args.file) == bool(args.files):
        print("error: give either FILE (a disk) or --file PATH=FILE (files of the image)", file=sys.stderr)
        return 1
    files: dict[str, Path] = {}
    for spec in args.files or []:
        image_path, sep, local = spec.partition("=")
        if not sep or not image_path or not local:
            print(f"error: --file {spec}: expected PATH=FILE, e.g. /boot/vmlinuz=vmlinuz", file=sys.stderr)
            return 1
        files[image_path] = Path(local)
    for path in [Path(args.file)] if args.file else files.values():
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return 1
    try:
        digest = store.import_files(args.ref, files) if files else store.import_file(args.ref, Path(args.file))
    except (ImagePullError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(f"{normalize_reference(args.ref)} {digest}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from pykubevirt.node.image_store import ImageStore

    try:
        images = ImageStore(Path(args.images_dir)).images()
    except OSError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    rows = [("IMAGE", "DIGEST", "SIZE")]
    rows += [(ref, digest.removeprefix("sha256:")[:12], _size(size)) for ref, digest, size in images]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for ref, digest, size in rows:
        print(f"{ref:<{widths[0]}}   {digest:<{widths[1]}}   {size}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("image", help="import and list the node's containerDisk images")
    images = parser.add_subparsers(dest="image_command", metavar="COMMAND")
    images.required = True
    imported = images.add_parser(
        "import", help="store a disk file as a containerDisk image, or files as an image (a kernel-boot container)"
    )
    imported.add_argument("ref", metavar="REF", help="image reference, e.g. pykubevirt.local/demo-guest:1.0")
    imported.add_argument("file", metavar="FILE", nargs="?", help="the disk file (qcow2 or raw) of a containerDisk")
    imported.add_argument(
        "--file",
        dest="files",
        action="append",
        metavar="PATH=FILE",
        help="put FILE at PATH in the image (repeatable), e.g. --file /boot/vmlinuz=vmlinuz for kernelBoot",
    )
    imported.add_argument(
        "--images-dir", default=DEFAULT_IMAGES_DIR, help=f"image store (default {DEFAULT_IMAGES_DIR})"
    )
    imported.set_defaults(func=_import)
    listed = images.add_parser("list", help="list the stored images")
    listed.add_argument("--images-dir", default=DEFAULT_IMAGES_DIR, help=f"image store (default {DEFAULT_IMAGES_DIR})")
    listed.set_defaults(func=_list)
