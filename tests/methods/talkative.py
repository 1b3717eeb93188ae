"""Talkative: a test-only plug-in method whose run fails with an error it words itself, as a
careless author might: a data check that quotes the record it refused (issue 52's planted
bug: "record text in an error raised by a data check (a record longer than 40 characters)").

It is Echo (``tests/methods/echo.py``) with a run that raises before it releases anything.
What it raises is chosen by ``TALKATIVE_RAISES`` (read when the run starts, so that one
registration serves every case, in this process or in a ``dpsyn`` process):

* ``synthesis`` (the default): ``SynthesisError`` quoting the longest record (the first
  one that fails a check of at most 40 characters), whole;
* ``window``: ``SynthesisError`` quoting 25 characters from inside that record;
* ``value``: ``ValueError`` quoting it (an error of no kind the service names);
* ``runtime``: ``RuntimeError`` quoting it, raised from a ``KeyError`` that quotes it too;
* ``plain``: ``SynthesisError`` that quotes no record (the negative control:
  :data:`PLAIN`).

A module named in ``DPSYN_METHOD_MODULES`` registers it with ``register(TALKATIVE)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields

from app.methods import (
    Counts,
    LLMBackend,
    Progress,
    Record,
    Stored,
    SynthesisResult,
    TaskSpec,
)
from app.results import SynthesisError
from tests.methods.echo import Echo, EchoConfig, EchoPlan

LONG = 40  # a record longer than this is refused by the data check
#: The negative control's message: a count and a bound, no record.
PLAIN = "talkative: the data check refused 1 record longer than 40 characters"


def _longest(records: Sequence[Record]) -> str:
    return max((record.text for record in records), key=len)


def _raise(kind: str, text: str) -> None:
    if kind == "plain":
        raise SynthesisError(PLAIN)
    if kind == "window":
        raise SynthesisError(f"talkative: odd characters near '...{text[5:30]}...'")
    if kind == "value":
        raise ValueError(f"talkative: cannot read {text!r}")
    if kind == "runtime":
        try:
            raise KeyError(text)
        except KeyError as err:
            raise RuntimeError(f"talkative: lookup failed for {text}") from err
    raise SynthesisError(f"talkative: a record is longer than {LONG} characters: {text!r}")


class TalkativePlan(EchoPlan):
    """Echo's plan, whose run fails in its data check (nothing is released)."""

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        del backend, public
        if progress is not None:
            progress(0, self.config.shots)
        _raise(os.environ.get("TALKATIVE_RAISES", "synthesis"), _longest(records))
        raise AssertionError("unreachable")


def _talkative(plan: EchoPlan) -> TalkativePlan:
    return TalkativePlan(**{f.name: getattr(plan, f.name) for f in fields(plan)})


class Talkative(Echo):
    """Echo whose run raises an error that may quote a record: registered by its importer."""

    name = "talkative"
    title = "Talkative (tests)"
    parameters = ()  # Echo's --echo-repeat stays Echo's
    stored_key = "echo"  # EchoPlan stores its config under "echo"
    unit = "checks"
    verb = "checking"

    def plan(self, task: TaskSpec, config: EchoConfig, counts: Counts) -> TalkativePlan:
        return _talkative(super().plan(task, config, counts))

    def rebuild(self, task: TaskSpec, stored: Stored) -> TalkativePlan:
        return _talkative(super().rebuild(task, stored))


TALKATIVE = Talkative()
