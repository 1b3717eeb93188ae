"""The workers' container healthcheck: is this container's ``dpsyn worker`` alive?

A worker touches ``DPSYN_WORKER_ALIVE_FILE`` from its lease reaper and its job's lease
heartbeat (``workers/lease.py``); it is alive while that file is fresh. Compose runs the check
every 30 s in every worker container, so it is its own console script,
``dpsyn-worker-health``, that imports only the standard library: ``dpsyn worker-health`` loads
the whole command line first (typer, rich, scipy and dp_accounting through the privacy
commands), 1.7-2 s of CPU per check beside a worker that needs its cores for jobs. Both run
:func:`check`, so they answer alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

#: The setting the worker writes (``Settings.worker_alive_file``), read here without
#: pydantic-settings: an empty value counts as unset, as it does there.
ALIVE_FILE_VARIABLE = "DPSYN_WORKER_ALIVE_FILE"
DEFAULT_MAX_AGE_S = 90.0


class UnhealthyError(Exception):
    """The worker is not (known to be) alive; the message says why and what to check."""


def alive_file_from_environment() -> str | None:
    return os.environ.get(ALIVE_FILE_VARIABLE) or None


def check(path: str | None, max_age_s: float = DEFAULT_MAX_AGE_S) -> str:
    """``alive (N s ago)`` if ``path`` was touched within ``max_age_s``; else
    :class:`UnhealthyError`."""
    if not path:
        raise UnhealthyError(
            f"dpsyn worker-health needs {ALIVE_FILE_VARIABLE} (as the worker has it)"
        )
    try:
        age = time.time() - Path(path).stat().st_mtime
    except FileNotFoundError:
        raise UnhealthyError(
            f"{path} does not exist: the worker has not started (or cannot write it)"
        ) from None
    if age > max_age_s:
        raise UnhealthyError(
            f"the worker has not renewed a lease or reaped for {age:.0f} s (> {max_age_s:g} s): "
            "it is stuck or has lost its database"
        )
    return f"alive ({age:.0f} s ago)"


def _max_age(text: str) -> float:
    value = float(text)
    if not value >= 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """``dpsyn-worker-health [--max-age S]``: exit 0 while the worker is alive, else 1 with
    the reason on stderr (2 for a wrong argument)."""
    parser = argparse.ArgumentParser(
        prog="dpsyn-worker-health",
        description="Exit 0 while this container's worker is alive (its "
        f"{ALIVE_FILE_VARIABLE} is fresh).",
    )
    parser.add_argument(
        "--max-age",
        type=_max_age,
        default=DEFAULT_MAX_AGE_S,
        help="Seconds; an older alive file is unhealthy (default %(default)g).",
    )
    arguments = parser.parse_args(argv)
    try:
        print(check(alive_file_from_environment(), arguments.max_age))
    except UnhealthyError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
