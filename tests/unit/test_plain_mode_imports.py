"""`pykubevirt apiserver --plain` knows no KubeVirt: nothing of pykubevirt.virtapi is loaded when it serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

# Starts the server as the command does, makes a write and a discovery request through it, stops it, and reports
# which pykubevirt.virtapi modules the process has loaded by then.
_PROBE = """
import asyncio, json, ssl, sys
import aiohttp
from pykubevirt.cli.main import build_parser
from pykubevirt.cli.apiserver_command import extensions
from pykubevirt.apiserver.server import EmbeddedAPIServer, ServerOptions
from pykubevirt.config.cluster_config import ClusterConfig

args = build_parser().parse_args(["apiserver", "--data-dir", sys.argv[1], "--listen", "127.0.0.1:0", *sys.argv[2:]])

async def main():
    server = EmbeddedAPIServer(ServerOptions(data_dir=__import__("pathlib").Path(args.data_dir), port=0),
                               extensions(ClusterConfig(), plain=args.plain))
    await server.start()
    context = ssl.create_default_context(cadata=server.pki.ca_pem.decode())
    headers = {"Authorization": f"Bearer {server.admin_token()}"}
    async with aiohttp.ClientSession(server.url, headers=headers, connector=aiohttp.TCPConnector(ssl=context)) as s:
        body = {"metadata": {"name": "probe"}, "data": {"a": "b"}}
        async with s.post("/api/v1/namespaces/default/configmaps", json=body) as reply:
            assert reply.status == 201, await reply.text()
        async with s.get("/apis") as reply:
            assert reply.status == 200
    await server.stop()

asyncio.run(main())
print(json.dumps(sorted(m for m in sys.modules if m.startswith("pykubevirt.virtapi"))))
"""


def _virtapi_modules(tmp_path: Path, *flags: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "data"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return modules


def test_plain_mode_imports_nothing_of_virtapi(tmp_path: Path) -> None:
    assert _virtapi_modules(tmp_path, "--plain") == []


def test_embedded_mode_runs_kubevirt_in_process(tmp_path: Path) -> None:
    # The control: the same probe without --plain loads virt-api's in-process extension.
    assert "pykubevirt.virtapi.embedded" in _virtapi_modules(tmp_path)
