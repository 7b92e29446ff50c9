"""How many nodes `pykubevirt up` starts when not told, and which recorded nodes a smaller `--nodes` leaves out."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_layout import ClusterLayout, node_count_file, recorded_node_count, recorded_nodes
from pykubevirt.cli.up_command import node_count


def make_nodes(data: Path, *names: str) -> None:
    for name in names:
        (data / "nodes" / name).mkdir(parents=True)


def test_a_fresh_data_dir_runs_one_node(tmp_path: Path) -> None:
    assert recorded_nodes(tmp_path) == [] and recorded_node_count(tmp_path) == 1


def test_the_count_is_the_one_the_supervisor_noted_last(tmp_path: Path) -> None:
    """`up --nodes 1` after two nodes: the next plain `up` keeps to one, the user's last choice."""
    make_nodes(tmp_path, "node01", "node02")
    (tmp_path / "run").mkdir()
    node_count_file(tmp_path).write_text("1\n")
    assert recorded_node_count(tmp_path) == 1
    node_count_file(tmp_path).write_text("garbage")
    assert recorded_node_count(tmp_path) == 2


def test_without_a_noted_count_it_is_the_highest_node_the_data_dir_ran_in_numeric_order(tmp_path: Path) -> None:
    make_nodes(tmp_path, "node02", "node10", "node01")
    (tmp_path / "nodes" / "node03").write_text("not a node's directory")
    make_nodes(tmp_path, "nodeX", "other")
    assert recorded_nodes(tmp_path) == ["node01", "node02", "node10"]
    assert recorded_node_count(tmp_path) == 10


def test_nodes_beyond_the_layouts_count_are_left_out(tmp_path: Path) -> None:
    make_nodes(tmp_path, "node01", "node02", "node03")
    assert ClusterLayout(tmp_path, node_count=1).left_out_nodes == ["node02", "node03"]
    assert ClusterLayout(tmp_path, node_count=3).left_out_nodes == []
    assert ClusterLayout(tmp_path, node_count=4).left_out_nodes == []


@pytest.mark.parametrize(
    ("value", "message"), [("0", "at least one node"), ("-2", "at least one node"), ("two", "not a number")]
)
def test_a_node_count_below_one_or_not_a_number_is_refused(value: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        node_count(value)
