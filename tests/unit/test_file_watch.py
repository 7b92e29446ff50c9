"""FileWatch: certificates loaded once their files are all there, loaded again when they change, and kept while
they are missing or unreadable."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from pykubevirt.pki.file_watch import FileWatch
from tests.support.waiting import eventually


class Loads:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        text = (self.directory / "a").read_text() + (self.directory / "b").read_text()
        if "broken" in text:
            raise ValueError("not a certificate")
        return text


def touch(path: Path, text: str, tick: int) -> None:
    path.write_text(text)
    # A distinct modification time even within the file system's timestamp granularity.
    os.utime(path, ns=(tick * 1_000_000_000, tick * 1_000_000_000))


def test_nothing_until_every_file_is_there_then_loaded_once_per_change(tmp_path: Path) -> None:
    load = Loads(tmp_path)
    watch = FileWatch((tmp_path / "a", tmp_path / "b"), load)
    assert watch.current() is None
    touch(tmp_path / "a", "1", 1)
    assert watch.current() is None and load.count == 0
    touch(tmp_path / "b", "2", 1)
    assert watch.current() == "12"
    first = watch.current()
    assert first == "12" and load.count == 1
    touch(tmp_path / "b", "3", 2)
    assert watch.current() == "13" and load.count == 2


def test_the_last_good_value_stays_while_files_are_missing_or_broken(tmp_path: Path) -> None:
    load = Loads(tmp_path)
    watch = FileWatch((tmp_path / "a", tmp_path / "b"), load)
    touch(tmp_path / "a", "1", 1)
    touch(tmp_path / "b", "2", 1)
    assert watch.current() == "12"
    (tmp_path / "b").unlink()
    assert watch.current() == "12"
    touch(tmp_path / "b", "broken", 2)
    assert watch.current() == "12"
    # A failed load is tried again at the next call, not remembered as seen.
    assert watch.current() == "12" and load.count == 3
    touch(tmp_path / "b", "4", 3)
    assert watch.current() == "14"


def test_a_watch_of_no_files_has_nothing() -> None:
    def never() -> str:
        raise AssertionError("loaded")

    assert FileWatch((), never).current() is None


async def test_wait_returns_once_the_files_are_there_and_follow_retries_what_it_could_not_apply(
    tmp_path: Path,
) -> None:
    load = Loads(tmp_path)
    watch = FileWatch((tmp_path / "a", tmp_path / "b"), load)
    waiting = asyncio.create_task(watch.wait(0.01, "the test files"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    touch(tmp_path / "a", "1", 1)
    touch(tmp_path / "b", "2", 1)
    first = await asyncio.wait_for(waiting, 5)
    assert first == "12"

    calls: list[tuple[str, str]] = []

    async def apply(new: str, old: str) -> bool:
        calls.append((new, old))
        # The first attempt fails (as a reload of a volume mid-update may): it is made again at the next poll.
        return len(calls) > 1

    following = asyncio.create_task(watch.follow(0.01, first, apply))
    try:
        await asyncio.sleep(0.05)
        assert calls == []
        touch(tmp_path / "b", "3", 2)
        await eventually(lambda: len(calls) >= 2, timeout=5)
        await asyncio.sleep(0.05)
        # Applied on the second try, and not again while nothing changes.
        assert calls == [("13", "12"), ("13", "12")]
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
