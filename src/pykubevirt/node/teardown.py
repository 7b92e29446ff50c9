"""Stopping everything a node agent started, as a power cut would: `pykubevirt down --all`, benchmarks, tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.node.pod_dirs import existing_pod_dirs, unmount_below
from pykubevirt.node.pod_network import remove_node_networks
from pykubevirt.node.processes import kill_group, kill_strays_of_pods


def kill_node_pods(node_data_dir: Path) -> int:
    """SIGKILL every pod process recorded under a node's data dir, and the QEMUs that left their groups; unmount
    the pods' hugetlbfs volumes; then remove the pods' network namespaces and free their IPs."""
    killed = 0
    pod_dirs = existing_pod_dirs(Path(node_data_dir) / "pods")
    for pod_dir in pod_dirs:
        for record in pod_dir.load_records().values():
            if record.pid > 0 and kill_group(record.pid, record.ticks):
                killed += 1
    # One scan of /proc for every pod's strays, not one per pod.
    runtimes = [pod_layout.short_runtime_dir(pod_dir.uid) for pod_dir in pod_dirs]
    killed += sum(kill_strays_of_pods(runtime + "/" for runtime in runtimes).values())
    for pod_dir, runtime in zip(pod_dirs, runtimes, strict=True):
        shutil.rmtree(runtime, ignore_errors=True)
        # A hugepages guest's hugetlbfs volumes would otherwise outlive the node's data dir.
        unmount_below(pod_dir.path)
    remove_node_networks(Path(node_data_dir))
    return killed
