"""A screenshot as PNG: QEMU's PPM re-encoded, a PNG passed through, what is neither refused."""

from __future__ import annotations

import struct
import zlib

import pytest

from pykubevirt.launcher.screenshot_png import PNG_MIME, PPM_MIME, ScreenshotError, as_png, ppm_to_png


def chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """The PNG's chunks, each checked against its CRC."""
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    found, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        found.append((kind, body))
        at += 12 + length
    return found


def test_a_ppm_becomes_an_rgb_png_with_the_same_pixels() -> None:
    pixels = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90])
    # A comment in the header, as netpbm allows: QEMU writes none, other producers do.
    png = ppm_to_png(b"P6\n# screendump\n3 2\n255\n" + pixels)
    (ihdr, header), (idat, data), (iend, end) = chunks(png)
    assert (ihdr, idat, iend, end) == (b"IHDR", b"IDAT", b"IEND", b"")
    assert struct.unpack(">IIBBBBB", header) == (3, 2, 8, 2, 0, 0, 0)
    assert zlib.decompress(data) == b"\x00" + pixels[:9] + b"\x00" + pixels[9:]
    assert as_png(PPM_MIME, b"P6 3 2 255\n" + pixels) == png


def test_a_png_passes_through_and_anything_else_is_refused() -> None:
    png = ppm_to_png(b"P6 1 1 255\n" + b"\x01\x02\x03")
    assert as_png(PNG_MIME, png) is png
    with pytest.raises(ScreenshotError, match="unsupported screenshot format 'image/jpeg'"):
        as_png("image/jpeg", b"\xff\xd8")
    with pytest.raises(ScreenshotError, match="needs 12 bytes of pixels, got 3"):
        ppm_to_png(b"P6 2 2 255\n" + b"\x01\x02\x03")
    with pytest.raises(ScreenshotError, match="maxval 65535"):
        ppm_to_png(b"P6 1 1 65535\n" + b"\x00" * 6)
    with pytest.raises(ScreenshotError, match="header is cut short"):
        ppm_to_png(b"P6 1")
