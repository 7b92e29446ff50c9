"""The image build's host-side steps on a small tree: cleaning a root, clamping its times, naming the commit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pykubevirt.images import rootfs, spec
from pykubevirt.images.build import Revision
from tests.paths import REPO

EPOCH = 1_700_000_000


def _file(root: Path, relative: str, text: str = "x") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_remove_volatile_drops_logs_lists_and_host_files_and_keeps_the_rest(tmp_path: Path) -> None:
    for relative in ("var/log/dpkg.log", "var/log/apt/history.log", "var/lib/apt/lists/deb_Packages", "etc/hostname"):
        _file(tmp_path, relative)
    _file(tmp_path, "etc/resolv.conf", "nameserver 10.0.0.1\n")
    (tmp_path / "tmp/wheels").mkdir(parents=True)
    kept = _file(tmp_path, "usr/bin/tool")
    rootfs.remove_volatile(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "etc/resolv.conf",
        "usr/bin/tool",
    ]
    # The runtime mounts its own resolv.conf over this empty one; the build host's never ships.
    assert (tmp_path / "etc/resolv.conf").read_text() == "" and kept.read_text() == "x"
    assert (tmp_path / "var/lib/apt/lists").is_dir() and not (tmp_path / "tmp/wheels").exists()


def test_clamp_mtimes_sets_newer_files_to_the_epoch_and_leaves_older_ones(tmp_path: Path) -> None:
    new = _file(tmp_path, "new")
    old = _file(tmp_path, "old")
    os.utime(old, (EPOCH - 100, EPOCH - 100))
    link = tmp_path / "link"
    link.symlink_to("new")
    rootfs.clamp_mtimes(tmp_path, EPOCH)
    assert new.stat().st_mtime == EPOCH and link.lstat().st_mtime == EPOCH
    assert old.stat().st_mtime == EPOCH - 100


def test_the_base_is_rebuilt_when_its_sources_change() -> None:
    sources = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
    other = sources.replace("deb.debian.org", "mirror.example")
    assert rootfs.base_key(sources) == rootfs.base_key(sources) != rootfs.base_key(other)


def test_the_revision_is_the_checkout_head_and_its_commit_time() -> None:
    rev = Revision.of(REPO)
    head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%H %ct"], capture_output=True, text=True)
    assert f"{rev.commit} {rev.epoch}" == head.stdout.strip()
    assert spec.image_tags(rev.commit, dirty=rev.dirty)[0].startswith(f"git-{rev.commit[:12]}")
