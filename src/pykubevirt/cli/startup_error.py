"""Expected start-up failures (a port in use, an unwritable or full data dir, a missing package) as one line each.

A component that fails for a reason the user can fix prints `error: WHAT; FIX` and exits 1 instead of a traceback;
the supervisor and `pykubevirt up` pass that line on (they find it by its `error: ` prefix in the component's log).
"""

from __future__ import annotations

import errno
import re

ERROR_PREFIX = "error: "
BOUND_ADDRESS = re.compile(r"address \('([^']+)', (\d+)")


class StartupError(Exception):
    """A failure with a known cause and fix; its message is the whole story."""


def explain(exc: BaseException) -> str | None:
    """The one-line cause of an expected failure, None for anything else (which keeps its traceback)."""
    if isinstance(exc, StartupError):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError):
        return f"the Python package {exc.name!r} is missing; run `make setup` (or pip install it into the venv)"
    if not isinstance(exc, OSError):
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno == errno.ENOENT and isinstance(exc.filename, str) and exc.filename and "/" not in exc.filename:
        # subprocess names a program it did not find on PATH by its bare name.
        return f"the program {exc.filename!r} is not installed; run `make setup` (`pykubevirt doctor` lists what lacks)"
    if exc.errno == errno.EADDRINUSE:
        return _address_in_use(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}; run as root or pass a --data-dir you can write"
    if exc.errno == errno.EROFS:
        return f"read-only file system{where}; pass a writable --data-dir"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device{where}; free some space or pass --data-dir on another disk"
    return None


def _address_in_use(exc: OSError) -> str:
    """asyncio names the address it failed to bind ("... on address ('127.0.0.1', 6443): ..."): name its owner too."""
    from pykubevirt.cli.port_owner import in_use_message, port_owner

    fix = "stop it or choose another port"
    found = BOUND_ADDRESS.search(str(exc))
    if found is None:
        return f"an address is already in use ({exc.strerror or exc}); {fix}"
    host, port = found.group(1), int(found.group(2))
    return in_use_message(host, port, port_owner(host, port), fix)


def last_error_line(text: str) -> str | None:
    """The last `error: ` line of a log, without its prefix."""
    for line in reversed(text.splitlines()):
        if line.startswith(ERROR_PREFIX):
            return line[len(ERROR_PREFIX) :].strip()
    return None
