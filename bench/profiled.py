"""A pykubevirt command under cProfile on a CPU-time clock, for the benches' --profile options.

Run: python -m bench.profiled OUT.prof virt-controller --kubeconfig ...   then: python -m pstats OUT.prof
The machine is shared, so a component's wall time is mostly waiting for a core; CPU time shows what it spends
itself. The command ends as usual (SIGTERM) and the profile is written on the way out.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import runpy
import sys
import time

from pykubevirt.cli.cluster_layout import pykubevirt_argv

USAGE = "usage: python -m bench.profiled OUT.prof COMMAND [ARGS...]   (a pykubevirt command, e.g. virt-controller)"


def main() -> None:
    # An option in place of the output file (`--help`, say) would otherwise become the profile's file name.
    if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        raise SystemExit(USAGE)
    out = sys.argv[1]
    sys.argv = ["pykubevirt", *sys.argv[2:]]
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    try:
        runpy.run_module("pykubevirt.cli.main", run_name="__main__")
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)


def component_argv(profile: str | None, *command: str) -> tuple[str, ...]:
    """The argv of a pykubevirt command, under this profiler when `profile` names its output file."""
    if profile:
        return (sys.executable, "-m", "bench.profiled", profile, *command)
    return tuple(pykubevirt_argv(*command))


def top(path: str, count: int = 15) -> str:
    """The `count` entries with the most CPU time of their own, as pstats prints them."""
    stream = io.StringIO()
    pstats.Stats(path, stream=stream).sort_stats("tottime").print_stats(count)
    return stream.getvalue()


if __name__ == "__main__":
    main()
