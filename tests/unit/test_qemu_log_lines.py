"""QEMU's log cut into the messages the launcher relays: one a line, its command line as one."""

from __future__ import annotations

from pathlib import Path

from pykubevirt.launcher.qemu_log import MAX_LINE_BYTES, QemuLogLines, qemu_log_path


def test_a_line_split_across_reads_comes_out_once_it_is_whole() -> None:
    lines = QemuLogLines()
    assert lines.feed(b"2026-12-05 19:52:01.825+0000: starting up libvirt") == []
    assert lines.feed(b" version: 9.0.0\nqemu-system-x86_64: warn") == [
        "2026-12-05 19:52:01.825+0000: starting up libvirt version: 9.0.0"
    ]
    assert lines.feed(b"ing: host doesn't support requested feature\n\n  \n") == [
        "qemu-system-x86_64: warning: host doesn't support requested feature"
    ]


def test_the_command_line_continued_with_backslashes_is_one_message() -> None:
    lines = QemuLogLines()
    written = b"LC_ALL=C \\\nPATH=/usr/bin \\\n/usr/bin/qemu-system-x86_64 \\\n-name guest=demo \\\n-S\r\nnext\n"
    assert lines.feed(written) == ["LC_ALL=C PATH=/usr/bin /usr/bin/qemu-system-x86_64 -name guest=demo -S", "next"]


def test_flush_gives_what_was_held_back() -> None:
    lines = QemuLogLines()
    assert lines.feed(b"LC_ALL=C \\\n-name guest=x \\\n") == []
    assert lines.feed(b"2026-12-05 19:55:00.000+0000: shutting down, reason=destroyed") == []
    # The file ended in the middle of a command line: both parts come out rather than be lost.
    assert lines.flush() == ["LC_ALL=C -name guest=x 2026-12-05 19:55:00.000+0000: shutting down, reason=destroyed"]
    assert lines.flush() == []
    assert lines.feed(b"later\n") == ["later"]


def test_a_line_without_end_is_logged_in_pieces() -> None:
    lines = QemuLogLines()
    piece = b"x" * (MAX_LINE_BYTES + 1)
    assert lines.feed(piece) == [piece.decode()]
    assert lines.feed(b"y\n") == ["y"]


def test_undecodable_bytes_are_replaced_not_fatal() -> None:
    assert QemuLogLines().feed(b"char device redirected to \xff\xfe\n") == ["char device redirected to \ufffd\ufffd"]


def test_the_log_sits_in_libvirts_qemu_directory(tmp_path: Path) -> None:
    assert qemu_log_path(tmp_path / "log", "default_demo") == tmp_path / "log" / "qemu" / "default_demo.log"
