"""An image's format from its first sector, for the two formats containerDisks hold, without running qemu-img.

Every launcher asked `qemu-img info` the format of its containerDisk, an exec that costs more CPU than the rest of the
disk's preparation (at 1,000 VMIs on a node, seconds of it). qemu-img probes each format driver and takes the best
score, raw being the fallback every other driver outbids. Here a qcow2 header settles it; a sector no other driver
would claim is raw; anything else (another format's magic, a text descriptor, a .dmg name) is left to qemu-img.
"""

from __future__ import annotations

from pathlib import Path

QCOW_MAGIC = b"QFI\xfb"
# The magics qemu's block drivers probe for at the start of an image (block/*.c), qcow2's aside.
_OTHER_MAGICS = (
    b"Bochs Virtual HD Image",
    b"#!/bin/sh",  # cloop
    b"LUKS\xba\xbe",
    b"WithoutFreeSpace",  # parallels
    b"WithouFreSpacExt",
    b"QED\x00",
    b"<<< ",  # vdi's text header
    b"vhdxfile",
    b"KDMV",  # vmdk, sparse
    b"COWD",  # vmdk, ESX sparse
    b"conectix",  # vpc
)
_VDI_SIGNATURE = b"\x7f\x10\xda\xbe"  # at 0x40, little-endian 0xbeda107f
_SECTOR = 512


def probed_format(path: Path) -> str | None:
    """ "qcow2" or "raw" when the first sector settles it, None when only qemu-img can tell."""
    if path.name.endswith(".dmg"):
        return None
    try:
        with open(path, "rb") as image:
            head = image.read(_SECTOR)
    except OSError:
        return None  # qemu-img then says why it cannot read it, as before
    if head.startswith(QCOW_MAGIC):
        version = int.from_bytes(head[4:8], "big")
        return "qcow2" if version in (2, 3) else None
    if head.startswith(_OTHER_MAGICS) or head[0x40:0x44] == _VDI_SIGNATURE:
        return None
    if head and head.isascii() and b"\x00" not in head:
        # Text: a vmdk descriptor (its probe reads `version=` lines) and its like.
        return None
    return "raw"
