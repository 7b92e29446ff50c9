"""A domain's screenshot as PNG, the format KubeVirt's `vnc/screenshot` answers with.

libvirt hands over what QEMU's screendump wrote: PPM (P6) from QEMU here, PNG from libvirt's test driver. PPM is
re-encoded as an 8-bit RGB PNG with no filter: a screen compresses well enough with zlib alone.
"""

from __future__ import annotations

import struct
import zlib

PNG_MIME = "image/png"
PPM_MIME = "image/x-portable-pixmap"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ScreenshotError(ValueError):
    """The image libvirt returned is not one this can turn into a PNG."""


def as_png(mime: str, data: bytes) -> bytes:
    if mime == PNG_MIME or data.startswith(_PNG_SIGNATURE):
        return data
    if mime == PPM_MIME or data.startswith(b"P6"):
        return ppm_to_png(data)
    raise ScreenshotError(f"unsupported screenshot format {mime!r}")


def _ppm_header(data: bytes) -> tuple[int, int, int, int]:
    """Width, height, maxval and where the pixels start, skipping `#` comments as netpbm allows."""
    fields: list[int] = []
    at = 2
    while len(fields) < 3:
        while at < len(data) and data[at : at + 1].isspace():
            at += 1
        if data[at : at + 1] == b"#":
            at = data.find(b"\n", at) + 1 or len(data)
            continue
        start = at
        while at < len(data) and data[at : at + 1].isdigit():
            at += 1
        if start == at:
            raise ScreenshotError("not a PPM image: its header is cut short")
        fields.append(int(data[start:at]))
    # Exactly one whitespace byte separates the header from the pixels.
    return fields[0], fields[1], fields[2], at + 1


def ppm_to_png(data: bytes) -> bytes:
    if not data.startswith(b"P6"):
        raise ScreenshotError("not a binary PPM (P6) image")
    width, height, maxval, start = _ppm_header(data)
    if maxval != 255:
        raise ScreenshotError(f"PPM images with maxval {maxval} are not supported")
    row = width * 3
    pixels = data[start : start + row * height]
    if len(pixels) != row * height or width <= 0 or height <= 0:
        raise ScreenshotError(f"a {width}x{height} PPM image needs {row * height} bytes of pixels, got {len(pixels)}")
    # Each scanline starts with its filter type, 0 (none).
    raw = b"".join(b"\x00" + pixels[y * row : (y + 1) * row] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return _PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
