"""The node's huge pages as the kubelet reports them in capacity."""

from __future__ import annotations

from pathlib import Path

from pykubevirt.node.registration import hugepages


def reserve(root: Path, size_kib: int, count: str) -> None:
    directory = root / f"hugepages-{size_kib}kB"
    directory.mkdir(parents=True)
    (directory / "nr_hugepages").write_text(f"{count}\n")


def test_reserved_pages_per_size_as_kubelet_resource_names(tmp_path: Path) -> None:
    reserve(tmp_path, 2048, "80")
    reserve(tmp_path, 1048576, "2")
    assert hugepages(tmp_path) == {"hugepages-2Mi": "160Mi", "hugepages-1Gi": "2048Mi"}


def test_sizes_the_kernel_lacks_are_left_out_and_none_reserved_is_zero(tmp_path: Path) -> None:
    reserve(tmp_path, 2048, "0")
    assert hugepages(tmp_path) == {"hugepages-2Mi": "0Mi"}
    assert hugepages(tmp_path / "absent") == {}
