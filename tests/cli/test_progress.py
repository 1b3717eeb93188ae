"""Progress off a terminal: plain lines, throttled, never silent (issue 12: a 17-minute run
printed nothing because a rich bar draws nothing into a file or a pipe)."""

from __future__ import annotations

import io

from rich.console import Console

from app.cli.progress import progress_reporter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_when_stderr_is_not_a_terminal():
    stream, clock = io.StringIO(), Clock()
    console = Console(file=stream, force_terminal=False, width=200)
    with progress_reporter(console, "synthesising", "tokens", interval=5, clock=clock) as report:
        report(0, 120)  # first step: a line at once
        for done in range(1, 120):
            clock.now += 0.5  # 2 steps a second: a line every 10 steps
            report(done, 120)
        clock.now += 0.1
        report(120, 120)  # the last step always
        report(120, 120)  # said once
    lines = stream.getvalue().splitlines()
    assert lines[0] == "synthesising: 0/120 tokens (0%), 0:00:00 elapsed"
    assert lines[1] == "synthesising: 10/120 tokens (8%), 0:00:05 elapsed"
    assert lines[-1] == "synthesising: 120/120 tokens (100%), 0:00:59 elapsed"
    assert len(lines) == 1 + 11 + 1


def test_a_status_change_is_logged_at_once():
    stream, clock = io.StringIO(), Clock()
    console = Console(file=stream, force_terminal=False, width=200)
    with progress_reporter(console, "job j1", "tokens", interval=60, clock=clock) as report:
        report(0, None, "queued")
        clock.now += 1
        report(0, None, "queued")  # nothing new, within the interval: silent
        report(0, 8, "running")
        clock.now += 2
        report(8, 8, "succeeded")
    assert stream.getvalue().splitlines() == [
        "job j1 [queued]: 0 tokens, 0:00:00 elapsed",
        "job j1 [running]: 0/8 tokens (0%), 0:00:01 elapsed",
        "job j1 [succeeded]: 8/8 tokens (100%), 0:00:03 elapsed",
    ]


def test_a_terminal_gets_a_transient_bar_not_lines():
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=100)
    with progress_reporter(console, "synthesising", "tokens") as report:
        for done in range(5):
            report(done, 4)
    assert "elapsed" not in stream.getvalue()  # no plain lines; the bar is erased at the end
