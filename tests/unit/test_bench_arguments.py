"""The benches' size flags: out-of-range sizes are refused by argparse in one line, and every bench runs as a file."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from bench.arguments import at_least, comma_separated, fraction, memory_size, one_of, positive

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if "argparse.ArgumentParser(" in p.read_text())


def test_whole_numbers_hold_their_minimum() -> None:
    assert at_least(0)("0") == 0
    assert at_least(1)("8000") == 8000
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1, not 0"):
        at_least(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"'1\.5' is not a whole number"):
        at_least(1)("1.5")


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "fast"])
def test_rates_and_durations_are_above_zero(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive(text)


def test_a_fraction_is_a_share() -> None:
    assert fraction("0.0625") == 0.0625
    assert fraction("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match="at most 1"):
        fraction("1.5")


def test_lists_of_memory_sizes_and_loads_are_checked_item_by_item() -> None:
    assert comma_separated(memory_size)("128Mi,512Mi") == "128Mi,512Mi"
    assert comma_separated(one_of("idle", "dirty"))("dirty") == "dirty"
    with pytest.raises(argparse.ArgumentTypeError, match="'lots' is not a memory size"):
        comma_separated(memory_size)("128Mi,lots")
    with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
        memory_size("0")
    with pytest.raises(argparse.ArgumentTypeError, match="'busy' is not one of idle, dirty"):
        comma_separated(one_of("idle", "dirty"))("idle,busy")


def run_as_file(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python bench/NAME.py ARGS` as a user types it, from `cwd`."""
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_each_bench_runs_as_a_file_from_elsewhere(script: Path, tmp_path: Path) -> None:
    # `python bench/NAME.py` puts bench/ first on the path, not the repository: the venv's path has to bring the
    # root (make setup), or the bench's own imports fail before its --help.
    shown = run_as_file(script, "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "usage:" in shown.stdout
    assert not any(tmp_path.iterdir()), "--help left a file behind"


def test_a_bench_refuses_a_size_of_zero_in_one_line(tmp_path: Path) -> None:
    refused = run_as_file(BENCH / "control_plane.py", "--vms", "0", cwd=tmp_path)
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last == "control_plane.py: error: argument --vms: must be at least 1, not 0"
    assert "Traceback" not in refused.stderr


def test_the_profiler_wrapper_takes_no_option_for_its_output_file(tmp_path: Path) -> None:
    shown = run_as_file(BENCH / "profiled.py", "--help", cwd=tmp_path)
    assert shown.returncode == 1
    assert shown.stderr.startswith("usage: python -m bench.profiled OUT.prof COMMAND")
    assert not any(tmp_path.iterdir()), "it wrote a profile named after the option"
