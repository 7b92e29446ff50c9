"""Kernel samepage merging on the node, as KubeVirt's virt-handler drives it (`pkg/virt-handler/ksm`).

Where the KubeVirt CR's `ksmConfiguration.nodeLabelSelector` selects this node, KSM is started when free memory falls
under 20% and tuned every 3 minutes, after oVirt MoM's ksm.rules: more pages a scan under pressure, fewer without,
stopped at the minimum. The node says so in the label `kubevirt.io/ksm-enabled` and, when this handler turned KSM
on, the annotation `kubevirt.io/ksm-handler-managed`; a node that leaves the selection has KSM stopped only then.
Annotations on the node override the tuning (`kubevirt.io/ksm-pages-boost-override`, …), as upstream's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import NODES
from pykubevirt.config.cluster_config import ClusterConfig

log = logging.getLogger("pykubevirt.handler.ksm")

ENABLED_LABEL = "kubevirt.io/ksm-enabled"
MANAGED_ANNOTATION = "kubevirt.io/ksm-handler-managed"
LOOP_SECONDS = 180.0
# The host's KSM knobs; upstream reads them through /proc/1/root from its container.
DEFAULT_KSM_DIR = Path("/sys/kernel/mm/ksm")
MEMINFO = Path("/proc/meminfo")

# (annotation, default, lowest, highest) of each tuning value; upstream's constants.
PAGES_BOOST = ("kubevirt.io/ksm-pages-boost-override", 300, 0, None)
PAGES_DECAY = ("kubevirt.io/ksm-pages-decay-override", -50, None, 0)
PAGES_MIN = ("kubevirt.io/ksm-pages-min-override", 64, 0, None)
PAGES_MAX = "kubevirt.io/ksm-pages-max-override", 1250
PAGES_INIT = "kubevirt.io/ksm-pages-init-override", 100
SLEEP_BASELINE = ("kubevirt.io/ksm-sleep-ms-baseline-override", 100, 1, None)
FREE_PERCENT = "kubevirt.io/ksm-free-percent-override", 0.2


@dataclass(frozen=True, slots=True)
class KsmState:
    """What KSM is told: run or not, milliseconds between scans, pages a scan."""

    running: bool
    sleep_ms: int = 0
    pages: int = 0


def _bounded(value: float, default: float, low: float | None, high: float | None, name: str) -> float:
    """boundCheck: an out-of-range override falls back to the default, or to the lowest value if that is out too."""
    below, above = low is not None and value < low, high is not None and value > high
    if not (below or above):
        return value
    inside = (low is None or default > low) and (high is None or default < high)
    fallback = default if inside or low is None else low
    log.error("%s override value out of bounds, using %s", name, fallback)
    return fallback


def _override(
    annotations: Mapping[str, str], name: str, default: float, low: float | None, high: float | None
) -> float:
    text = annotations.get(name)
    if text is None:
        return default
    try:
        value = float(text) if isinstance(default, float) else int(text)
    except ValueError:
        log.error("failed to parse %s override value, using default", name)
        return default
    return _bounded(value, default, low, high, name)


def meminfo(text: str) -> tuple[int, int]:
    """MemTotal and MemAvailable (kB) from /proc/meminfo; ValueError when either is missing."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            found[key] = int(rest.split()[0])
    if len(found) != 2:
        raise ValueError("failed to find total and available memory")
    return found["MemTotal"], found["MemAvailable"]


def next_state(annotations: Mapping[str, str], running: bool, pages: int, total_kb: int, available_kb: int) -> KsmState:
    """calculateNewRunSleepAndPages: start or boost under memory pressure, decay and stop without it."""
    boost = int(_override(annotations, *PAGES_BOOST))
    decay = int(_override(annotations, *PAGES_DECAY))
    pages_min = int(_override(annotations, *PAGES_MIN))
    pages_max = int(_override(annotations, *PAGES_MAX, pages_min, None))
    pages_init = int(_override(annotations, *PAGES_INIT, pages_min, pages_max))
    baseline = int(_override(annotations, *SLEEP_BASELINE))
    free_percent = _override(annotations, *FREE_PERCENT, 0.0, 1.0)
    # sleep_millisecs is the baseline on a 16 GiB host out of memory, less the more memory there is to scan.
    used = max(total_kb - available_kb, 1)
    sleep = max(baseline * 16 * 1024 * 1024 // used, baseline // 10)
    if available_kb > total_kb * free_percent:
        if not running:
            return KsmState(False)
        pages += decay
        return KsmState(pages >= pages_min, sleep, max(pages, pages_min))
    if not running:
        return KsmState(True, sleep, pages_init)
    return KsmState(True, sleep, min(pages + boost, pages_max))


class KsmHandler:
    """Runs the KSM loop for one node: `changed()` when the configuration changes, `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        node: str,
        config: Callable[[], ClusterConfig],
        ksm_dir: Path = DEFAULT_KSM_DIR,
        meminfo_path: Path = MEMINFO,
        interval: float = LOOP_SECONDS,
    ) -> None:
        self.client = client
        self.node = node
        self.config = config
        self.ksm_dir = ksm_dir
        self.meminfo_path = meminfo_path
        self.interval = interval
        self._wake = asyncio.Event()

    def changed(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.spin()
            except (ApiError, OSError) as exc:
                log.warning("ksm handling failed: %s", exc, extra={"node": self.node})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)

    def _read(self, name: str) -> str:
        return (self.ksm_dir / name).read_text().strip()

    def _write(self, name: str, value: object) -> None:
        (self.ksm_dir / name).write_text(f"{value}\n")

    async def spin(self) -> bool:
        """One pass: whether the node is selected; KSM tuned, or stopped when it left the selection."""
        try:
            running = self._read("run") == "1"
        except OSError:
            return False  # no KSM on this kernel: nothing to handle, and nothing said (upstream's loadKSM)
        node = await self.client.get(NODES, self.node)
        meta = node.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        selector = self.config().ksm_node_selector
        eligible = selector is not None and selector.matches(labels)
        managed = False
        if not eligible and running and annotations.get(MANAGED_ANNOTATION) == "true":
            self._write("run", 0)
            log.info("ksm stopped: the node left the ksm selection", extra={"node": self.node})
        if eligible:
            managed = self._tune(annotations, running)
        patch: dict[str, Any] = {
            "metadata": {
                "labels": {ENABLED_LABEL: str(eligible).lower()},
                "annotations": {MANAGED_ANNOTATION: str(managed).lower()},
            }
        }
        if (
            labels.get(ENABLED_LABEL) != patch["metadata"]["labels"][ENABLED_LABEL]
            or annotations.get(MANAGED_ANNOTATION) != patch["metadata"]["annotations"][MANAGED_ANNOTATION]
        ):
            await self.client.patch(NODES, self.node, patch)
        return eligible

    def _tune(self, annotations: Mapping[str, str], running: bool) -> bool:
        try:
            total, available = meminfo(self.meminfo_path.read_text())
            state = next_state(annotations, running, int(self._read("pages_to_scan")), total, available)
            if state.running:
                self._write("sleep_millisecs", state.sleep_ms)
                self._write("pages_to_scan", state.pages)
            self._write("run", int(state.running))
        except (OSError, ValueError) as exc:
            log.error("an error occurred while setting the ksm values: %s", exc, extra={"node": self.node})
            return False
        if state.running != running:
            log.info(
                "ksm %s (%d pages a scan, every %d ms)",
                "started" if state.running else "stopped",
                state.pages,
                state.sleep_ms,
                extra={"node": self.node},
            )
        return state.running
