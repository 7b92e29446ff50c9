"""Expectations: what a controller just created or deleted and has not yet seen in its cache.

Reconciling while an expected change is still missing from the cache would act on stale data (for example
create a second VMI), so reconcilers wait until the expectation is observed or times out (KubeVirt: 5 min).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

EXPECTATIONS_TTL_SECONDS = 300.0


@dataclass(slots=True)
class _Record:
    adds: int
    timestamp: float
    # Deletions are tracked by the deleted object's key (KubeVirt's UIDTrackingControllerExpectations): each is
    # observed once however many events show it going (marked for deletion, then gone).
    deleting: set[str] = field(default_factory=set)


class ControllerExpectations:
    """Per key: the count of pending creations and the keys of objects whose deletion is pending."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl: float = EXPECTATIONS_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl
        self._records: dict[str, _Record] = {}

    def expect_creations(self, key: str, count: int = 1) -> None:
        self._record(key).adds += count

    def expect_deletion(self, key: str, item: str) -> None:
        self._record(key).deleting.add(item)

    def _record(self, key: str) -> _Record:
        """The key's record, fresh if it had none or it expired, its clock restarted."""
        record = self._records.get(key)
        if record is None or self._expired(record):
            record = self._records[key] = _Record(0, self._clock())
        record.timestamp = self._clock()
        return record

    @contextlib.contextmanager
    def creating(self, key: str) -> Iterator[None]:
        """Expect one creation around the write; any failure (a lost connection too) withdraws it, as KubeVirt does."""
        self.expect_creations(key)
        try:
            yield
        except BaseException:
            self.creation_observed(key)
            raise

    @contextlib.contextmanager
    def deleting(self, key: str, item: str) -> Iterator[None]:
        """Expect the deletion of `item` around the write; any failure withdraws it."""
        self.expect_deletion(key, item)
        try:
            yield
        except BaseException:
            self.deletion_observed(key, item)
            raise

    def creation_observed(self, key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.adds -= 1

    def deletion_observed(self, key: str, item: str) -> None:
        """`item` is gone or going: observing it again changes nothing."""
        record = self._records.get(key)
        if record is not None:
            record.deleting.discard(item)

    def satisfied(self, key: str) -> bool:
        record = self._records.get(key)
        if record is None:
            return True
        if (record.adds <= 0 and not record.deleting) or self._expired(record):
            return True
        return False

    def pending_creations(self, key: str) -> bool:
        record = self._records.get(key)
        return record is not None and record.adds > 0 and not self._expired(record)

    def pending_deletions(self, key: str) -> bool:
        record = self._records.get(key)
        return record is not None and bool(record.deleting) and not self._expired(record)

    def delete(self, key: str) -> None:
        self._records.pop(key, None)

    def _expired(self, record: _Record) -> bool:
        return self._clock() - record.timestamp > self._ttl
