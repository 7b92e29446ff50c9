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


@pytest.mark.usefixtures("restored_collector")
def test_a_young_collection_looks_at_a_bounded_number_of_objects_and_a_growing_heap_gets_no_full_collection() -> None:
    """A pause is what a collection must look at: stored objects piling up must not make a young collection long."""
    pace_garbage_collection()
    young_sizes: list[int] = []
    full_collections: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        if info["generation"] == 2:
            full_collections.append(1)
        elif info["generation"] == 1:
            young_sizes.append(len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1)))

    gc.callbacks.append(watch)
    try:
        kept = [{"metadata": {"labels": [i]}} for i in range(150_000)]  # what a store holds: containers that survive
    finally:
        gc.callbacks.remove(watch)
    assert len(kept) == 150_000
    assert young_sizes, "the objects were never looked at by a middle-generation collection"
    # A middle collection runs once the young one ran `threshold1` times; the counts tip one past each threshold.
    limit = THRESHOLDS[0] * (THRESHOLDS[1] + 1) * 1.25
    assert max(young_sizes) <= limit, f"a young collection looked at {max(young_sizes)} objects"
    assert not full_collections
