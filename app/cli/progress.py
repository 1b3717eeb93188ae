"""Progress of long commands: a bar on a terminal, plain lines everywhere else.

A rich bar draws nothing when stderr is a file or a pipe (a CI log, ``nohup``, ``2> log``),
so a 17-minute run looked dead. When stderr is not a terminal, :func:`progress_reporter`
prints one line per step instead, at most one every ``interval`` seconds (token steps can be
thousands), always the first and the last one, and whenever the status changes.
Lines carry counts and times only, never record text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

# Seconds between two plain progress lines when stderr is not a terminal.
LOG_INTERVAL = 5.0


class Report(Protocol):
    """``report(done, total)``; ``total`` None while unknown, ``status`` e.g. a job's."""

    def __call__(self, done: int, total: int | None, status: str | None = None) -> None: ...


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class _LineLog:
    """The non-terminal reporter: a plain line now and then, never a redraw."""

    def __init__(
        self, console: Console, verb: str, unit: str, interval: float, clock: Callable[[], float]
    ) -> None:
        self.console, self.verb, self.unit = console, verb, unit
        self.interval, self.clock = interval, clock
        self.started = clock()
        self.last_line: float | None = None
        self.last_status: str | None = None
        self.last_done: int | None = None

    def __call__(self, done: int, total: int | None, status: str | None = None) -> None:
        now = self.clock()
        finished = total is not None and done >= total
        due = self.last_line is None or now - self.last_line >= self.interval
        if not (due or finished or status != self.last_status):
            return
        if finished and done == self.last_done and status == self.last_status:
            return  # the last line already said so
        self.last_line, self.last_status, self.last_done = now, status, done
        count = f"{done}/{total}" if total else f"{done}"
        percent = f" ({100 * done / total:.0f}%)" if total else ""
        state = f" [{status}]" if status else ""
        self.console.print(
            f"{self.verb}{state}: {count} {self.unit}{percent}, "
            f"{_elapsed(now - self.started)} elapsed",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@contextmanager
def progress_reporter(
    console: Console,
    verb: str,
    unit: str,
    *,
    interval: float = LOG_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Report]:
    """Yield ``report(done, total, status=None)``: a transient bar on a terminal, else lines."""
    if not console.is_terminal:
        yield _LineLog(console, verb, unit, interval, clock)
        return
    with Progress(
        TextColumn(verb + "{task.fields[state]}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn(unit),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(unit, total=None, state="")

        def report(done: int, total: int | None, status: str | None = None) -> None:
            state = f" {status}" if status else ""
            bar.update(task, completed=done, total=total or None, state=state)

        yield report
