"""schemathesis against the real server's own OpenAPI v3, core and kubevirt.io groups: no request may get a 5xx.

Bounded in examples per operation and in seconds per group, derandomized so a failure reproduces.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.support.apiserver_process import APIServerProcess

EXAMPLES_PER_OPERATION = 10
SECONDS_PER_GROUP = 60.0
GROUPS = ["api/v1", "apis/kubevirt.io/v1"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    running = APIServerProcess(Path(tmp_path_factory.mktemp("fuzz")) / "data").start()
    yield running
    running.stop()


def _openapi(server: APIServerProcess, group: str) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(server.ca_file()))
    request = urllib.request.Request(
        f"{server.url}/openapi/v3/{group}", headers={"Authorization": f"Bearer {server.token()}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        document: dict[str, Any] = json.load(answer)
    return document


@pytest.mark.parametrize("group", GROUPS)
def test_no_generated_request_gets_a_5xx(server: APIServerProcess, group: str) -> None:
    schema = schemathesis.openapi.from_dict(_openapi(server, group))
    headers = {"Authorization": f"Bearer {server.token()}"}
    deadline = time.monotonic() + SECONDS_PER_GROUP
    failures: list[str] = []
    exercised = 0
    for result in schema.get_all_operations():
        if time.monotonic() > deadline:
            break
        operation = result.ok()

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: schemathesis.Case) -> None:
            response = case.call(base_url=server.url, headers=headers, verify=str(server.ca_file()), timeout=30)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}")

        call()
        exercised += 1
    assert exercised >= 10, f"only {exercised} operations of {group} were exercised"
    assert not failures, "\n".join(failures[:20])
