"""The cluster CIDR of a data dir across `down --all` and `up`, with the host's real namespaces: taken again when
still free, another when another cluster took it meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_network import (
    RELEASED_CIDR_FILE,
    choose_cluster_cidr,
    recorded_cidr,
    release_cluster_network,
)
from pykubevirt.node import netns
from pykubevirt.node.pod_network import ClusterNetwork


@pytest.fixture
def data_dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    first, second = tmp_path / "first", tmp_path / "second"
    yield first, second
    for data_dir in (first, second):
        release_cluster_network(data_dir)


def test_a_released_cidr_is_taken_again_unless_another_cluster_took_it(data_dirs: tuple[Path, Path]) -> None:
    first, second = data_dirs
    a, b = choose_cluster_cidr(first), choose_cluster_cidr(second)
    assert a != b and netns.exists(ClusterNetwork(b).netns) and recorded_cidr(second) == b
    release_cluster_network(first)
    release_cluster_network(second)
    assert not netns.exists(ClusterNetwork(b).netns) and recorded_cidr(second) == ""
    # `up` after `down --all` takes its own again, not the first free one, so the data dir's Nodes keep their
    # podCIDRs.
    assert choose_cluster_cidr(second) == b
    release_cluster_network(second)
    # Another cluster that once had `a` too came up meanwhile and took it again: the first gets another.
    (second / RELEASED_CIDR_FILE).write_text(a + "\n")
    assert choose_cluster_cidr(second) == a
    other = choose_cluster_cidr(first)
    assert other != a and netns.exists(ClusterNetwork(other).netns)
