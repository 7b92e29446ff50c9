"""A synchronous write that awaits a webhook: the loop serves others meanwhile, and never while the write runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pykubevirt.apiserver import suspension


async def test_the_write_awaits_on_the_loop_while_other_tasks_run() -> None:
    seen: list[str] = []
    release = asyncio.Event()

    async def webhook() -> str:
        seen.append("webhook called")
        await release.wait()
        return "allowed"

    def write() -> str:
        seen.append("write starts")
        answer = suspension.await_from_write(webhook())
        seen.append(f"write resumes: {answer}")
        return "stored"

    async def other() -> None:
        seen.append("other request served")
        release.set()

    task = asyncio.create_task(suspension.run_suspendable(write))
    await asyncio.sleep(0)
    await asyncio.gather(task, other())
    assert task.result() == "stored"
    assert seen == ["write starts", "webhook called", "other request served", "write resumes: allowed"]


async def test_the_loop_thread_waits_while_the_write_runs() -> None:
    loop_thread = threading.get_ident()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    def write() -> int:
        assert threading.get_ident() != loop_thread
        before = ticks
        threading.Event().wait(0.05)  # the write's own work; the loop must not run meanwhile
        return ticks - before

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    assert await suspension.run_suspendable(write) == 0
    task.cancel()


async def test_an_error_of_the_awaited_call_is_raised_in_the_write() -> None:
    async def failing() -> None:
        raise ValueError("webhook down")

    def write() -> str:
        try:
            suspension.await_from_write(failing())
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert await suspension.run_suspendable(write) == "webhook down"
    assert not suspension.in_suspendable_write()
    with pytest.raises(RuntimeError):
        suspension.await_from_write(failing())
