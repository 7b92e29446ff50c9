"""The long-running components collect cycles at their own pace, with start-up's objects kept out of collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from pykubevirt.cli.garbage_collection import THRESHOLDS, pace_garbage_collection


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
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
