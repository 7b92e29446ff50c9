"""virt-handler's /metrics with many VMIs: the time of one scrape of N running launchers on libvirt's test driver.

Starts N real virt-launcher processes (test:///default, no QEMU), syncs a VMI into each, then times whole scrapes
(one `domainstats` request per launcher, gathered concurrently, rendered in Prometheus' text format). Aim: 100 VMIs
under 200 ms.
Run: .venv/bin/python -m bench.metrics_scrape [--vmis 100 --scrapes 20]
Prints progress on stderr and one JSON line with the figures on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.launcher_process import LauncherProcess, defaulted_vmi, start_launcher

from bench.arguments import at_least
from bench.harness import log, machine, percentile
from pykubevirt.handler.domain_stats_scrape import DomainStatsScraper

NODE = "bench-node"


class Store:
    def __init__(self) -> None:
        self.vmis: list[dict[str, Any]] = []

    def items(self) -> list[dict[str, Any]]:
        return self.vmis


async def start(tmp: Path, index: int, store: Store) -> LauncherProcess:
    name = f"vm{index:03d}"
    uid = str(uuid.uuid4())
    launcher = start_launcher(tmp, name, uid)
    await launcher.wait_ready(within=120.0)
    vmi = defaulted_vmi(name, uid)
    vmi["metadata"]["labels"] = {"kubevirt.io/domain": name}
    await launcher.client().sync(vmi)
    vmi["status"] = {"phase": "Running", "nodeName": NODE, "activePods": {launcher.pod_uid: NODE}}
    store.vmis.append(vmi)
    return launcher


async def main(vmis: int, scrapes: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkv-metrics-bench-"))
    store = Store()
    launchers: list[LauncherProcess] = []
    try:
        for batch in range(0, vmis, 10):
            launchers += await asyncio.gather(*(start(tmp, i, store) for i in range(batch, min(batch + 10, vmis))))
            log(f"{len(launchers)} launchers running")
        scraper = DomainStatsScraper(node=NODE, pods_dir=tmp / "pods", vmis=store)
        await scraper.exposition()
        times: list[float] = []
        body = b""
        for _ in range(scrapes):
            began = time.perf_counter()
            body = await scraper.exposition()
            times.append((time.perf_counter() - began) * 1000)
        reported = body.count(b"kubevirt_vmi_cpu_usage_seconds_total{")
        return {
            "vmis": vmis,
            "reported": reported,
            "scrape_ms_p50": round(percentile(times, 0.5), 1),
            "scrape_ms_max": round(max(times), 1),
            "body_bytes": len(body),
            "machine": machine(),
        }
    finally:
        for launcher in launchers:
            launcher.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--vmis", type=at_least(1), default=100)
    parser.add_argument("--scrapes", type=at_least(1), default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.vmis, args.scrapes))))
