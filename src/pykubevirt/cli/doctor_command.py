"""`pykubevirt doctor`: check the host for everything the embedded cluster and its features need, with the fixes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pykubevirt.cli.cluster_layout import DEFAULT_DATA_DIR, DEFAULT_LISTEN
from pykubevirt.cli.host_checks import FAIL, Check, worst


def table(checks: Sequence[Check]) -> str:
    """CHECK, STATUS, DETAIL and FIX columns; the fix only where something is to be done."""
    rows = [("CHECK", "STATUS", "DETAIL", "FIX"), *((c.name, c.status, c.detail, c.fix) for c in checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        lines.append("   ".join([*cells, row[3]]).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pykubevirt.cli.cluster_layout import ClusterLayout
    from pykubevirt.cli.host_facts import doctor_checks
    from pykubevirt.cli.up_command import supervisor_pid

    layout = ClusterLayout(Path(args.data_dir).resolve(), 1, args.listen)
    checks = doctor_checks(layout, ours=bool(supervisor_pid(layout)))
    print(table(checks))
    verdict = worst(checks)
    failed = sum(check.status == FAIL for check in checks)
    print(f"\n{verdict}: " + (f"{failed} check(s) failed" if failed else "this host can run pykubevirt"))
    return 1 if failed else 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("doctor", help="check this host for what the cluster needs; exit 1 on any FAIL")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="the data dir `up` will use")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT `up` will serve the API on")
    parser.set_defaults(func=run)
