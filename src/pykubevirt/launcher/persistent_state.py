"""Where the launcher keeps a VM's persistent EFI variables and TPM state: on its backend-storage claim.

virt-controller mounts the claim by subPath at libvirt's NVRAM and swtpm directories (api.backend_storage); a
launcher learns from its mounts whether it has them. The NVRAM file is named in the domain XML, so the converter
takes the claim's directory. swtpm state lives under the embedded libvirt's root (`<root>/lib/swtpm`, a fresh
directory per pod), so that path becomes a link to the claim's directory before libvirt starts.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from pykubevirt.api import backend_storage as bs

# Where an embedded libvirt (`qemu:///embed?root=<root>`) keeps swtpm state: `<root>/lib/swtpm/<domain uuid>/tpm2`.
EMBED_SWTPM_DIR = ("lib", "swtpm")


def _mounted(mounts: Mapping[str, str], *paths: str) -> str | None:
    return next((mounts[path] for path in paths if path in mounts), None)


def nvram_dir(mounts: Mapping[str, str]) -> str | None:
    """The host directory of the claim's `nvram` mount (root or non-root path), None without persistent EFI."""
    return _mounted(mounts, bs.NVRAM_DIR, bs.NON_ROOT_NVRAM_DIR)


def swtpm_dir(mounts: Mapping[str, str]) -> str | None:
    """The host directory of the claim's `swtpm` mount, None without a persistent TPM."""
    return _mounted(mounts, bs.SWTPM_DIR, bs.NON_ROOT_SWTPM_DIR)


def link_swtpm_storage(embed_root: Path, mounts: Mapping[str, str]) -> Path | None:
    """Make the embedded libvirt's swtpm directory the claim's; returns the link, None without a persistent TPM."""
    target = swtpm_dir(mounts)
    if target is None:
        return None
    Path(target).mkdir(parents=True, exist_ok=True)
    link = embed_root.joinpath(*EMBED_SWTPM_DIR)
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        if os.readlink(link) == target:
            return link
        link.unlink()
    elif link.is_dir():
        # An earlier connection of this pod made it before the link; the TPM never ran from it.
        shutil.rmtree(link)
    link.symlink_to(target)
    return link
