"""Shared fixtures: a real API server process per test session or per test, and kubectl wired to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.apiserver.store import CHECK_STORED_ENV
from tests.support.apiserver_process import APIServerProcess
from tests.support.ports import free_port

# Every API server the suite starts, in its process or as a child, checks that no stored object is changed in place.
os.environ[CHECK_STORED_ENV] = "1"


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """One API server shared by the session's tests; tests use their own namespaces or unique names."""
    server = APIServerProcess(tmp_path_factory.mktemp("apiserver") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def fresh_apiserver(tmp_path: Path) -> Iterator[APIServerProcess]:
    """An API server of the test's own, for tests that restart or kill it."""
    # A port outside the kernel's ephemeral range: a restart on the same port cannot find it taken by an outgoing
    # connection in between.
    server = APIServerProcess(tmp_path / "data").start(port=free_port())
    yield server
    server.stop()
