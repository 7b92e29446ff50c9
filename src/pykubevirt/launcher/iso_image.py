"""ISO images for the guest: Rock Ridge and Joliet over level-3 ISO9660, as xorrisofs writes KubeVirt's.

Used for cloud-init's ISOs and for ConfigMap, Secret, DownwardAPI, ServiceAccount and Sysprep disks. The real file
names live in the Rock Ridge and Joliet records; the ISO9660 names are derived and made unique.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pycdlib
from pycdlib.pycdlibexception import PyCdlibException

# xorrisofs -partition_cyl_align on (KubeVirt's flags) pads to whole 1 MiB cylinders; without it the size is not a
# multiple of the host's O_DIRECT alignment and QEMU refuses the disk under cache=none.
ISO_CYLINDER_BYTES = 64 * 32 * 512
JOLIET_MAX = 64


def _iso9660_name(component: str, is_file: bool) -> str:
    """A level-3 ISO9660 identifier for a component."""
    name = "".join(char if char.isalnum() or char in "._" else "_" for char in component.upper())
    if not is_file:
        return name.replace(".", "_")
    stem, _, ext = name.rpartition(".") if "." in name else (name, "", "")
    return f"{stem.replace('.', '_')}.{ext}"


def _joliet_name(component: str) -> str:
    """Joliet keeps at most 64 characters of a name (xorrisofs -joliet truncates the same way)."""
    return component[:JOLIET_MAX]


class _Names:
    """Paths in one of the image's name spaces for real paths: the same real path always gets the same one, two real
    paths never do (a name that would collide gets `_1`, `_2`… before its extension)."""

    def __init__(self, name: Callable[[str, bool], str], limit: int = 0) -> None:
        self.name = name
        self.limit = limit
        self.by_real: dict[str, str] = {}
        self.taken: set[str] = set()

    def of(self, real: str, is_file: bool) -> str:
        if real in self.by_real:
            return self.by_real[real]
        parent, _, component = real.rpartition("/")
        prefix = f"{self.of(parent, False)}/" if parent else "/"
        base = self.name(component, is_file)
        candidate, counter = base, 1
        while prefix + candidate in self.taken:
            stem, dot, ext = base.rpartition(".") if "." in base else (base, "", "")
            suffix = f"_{counter}{dot}{ext}"
            candidate = (stem[: self.limit - len(suffix)] if self.limit else stem) + suffix
            counter += 1
        path = prefix + candidate
        self.taken.add(path)
        self.by_real[real] = path
        return path


def write_iso(files: Iterable[tuple[str, bytes]], label: str, target: Path) -> None:
    """Write the files (`a/b/name`, content) to `<target>.staging`, then rename it over `target` in one step."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".staging")
    staging.unlink(missing_ok=True)
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=label)
    names = _Names(_iso9660_name)
    joliet = _Names(lambda component, _: _joliet_name(component), JOLIET_MAX)
    try:
        for path, content in files:
            parts = path.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory in names.by_real:
                    continue
                iso.add_directory(
                    names.of(directory, False), rr_name=parts[depth - 1], joliet_path=joliet.of(directory, False)
                )
            iso_path, joliet_path = names.of(path, True) + ";1", joliet.of(path, True)
            iso.add_fp(io.BytesIO(content), len(content), iso_path, rr_name=parts[-1], joliet_path=joliet_path)
        iso.write(str(staging))
        size = staging.stat().st_size
        os.truncate(staging, -(-size // ISO_CYLINDER_BYTES) * ISO_CYLINDER_BYTES)
    except PyCdlibException as exc:
        staging.unlink(missing_ok=True)
        raise OSError(f"cannot write the ISO: {exc}") from exc
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    finally:
        iso.close()
    os.replace(staging, target)
