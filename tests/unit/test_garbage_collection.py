"""The long-running components collect cycles at their own pace, with long-lived objects kept out of collections."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.cli.garbage_collection import THRESHOLDS, pace_garbage_collection

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.callbacks[:] = callbacks
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.mark.usefixtures("restored_collector")
def test_the_pace_is_set_and_start_up_objects_are_frozen_while_new_cycles_are_still_collected() -> None:
    pace_garbage_collection()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > 0
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    assert alive() is not None, "a cycle outlives reference counting"
    gc.collect()
    assert alive() is None


@pytest.mark.usefixtures("restored_collector")
def test_pacing_twice_leaves_one_pacer() -> None:
    pace_garbage_collection()
    pace_garbage_collection()
    assert sum(type(c).__name__ == "_Pacer" for c in gc.callbacks) == 1


def run_isolated(script: str) -> list[str]:
    """Run `script` in a fresh interpreter (the pacer changes the collector of the whole process); its output lines."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={"PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout.split()


def test_survivors_of_a_middle_collection_leave_the_collectors_sight() -> None:
    out = run_isolated(
        """
        import gc
        from pykubevirt.cli.garbage_collection import pace_garbage_collection
        pace_garbage_collection()
        before = gc.get_freeze_count()
        kept = [[i] for i in range(20_000)]
        gc.collect(1)
        print(gc.get_freeze_count() - before >= 20_000, gc.get_count()[1] == 0)
        """
    )
    assert out == ["True", "True"]


def test_a_cycle_dropped_after_it_was_frozen_is_collected_once_the_frozen_heap_has_doubled() -> None:
    # Only allocations drive the collections here, as in a component: nothing calls a full gc.collect().
    out = run_isolated(
        """
        import gc, weakref
        from pykubevirt.cli.garbage_collection import pace_garbage_collection
        pace_garbage_collection(smallest_baseline=50_000)
        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        cycle = weakref.ref(a)
        gc.collect(1)
        del a, b
        kept = [[i] for i in range(40_000)]
        print(cycle() is not None)
        kept += [[i] for i in range(600_000)]
        print(cycle() is None, gc.get_threshold()[2] > 1000)
        """
    )
    assert out == ["True", "True", "True"], "frozen while alive, kept past its death, then collected"
