"""How long ``dpsyn advise`` says the rest will take (:mod:`app.eval.run_estimate`).

Issue 55: advise said "the rest about 2.9 h (rough)" and took 7.9 min in all. It priced every
teacher pass a priori at four of zero-shot's scoring passes; the estimate now comes from the
runs' measured durations, as a range while few are measured.
"""

from __future__ import annotations

import pytest

from app.eval.advice import AdviceConfig, _profile, planned_runs
from app.eval.run_estimate import BASELINE, PlannedRun, RunEstimate, say
from app.synthesis.tasks import BUILTIN_TASKS

#: The issue's walk: a 4-label custom task (its name is not a built-in one, so M is the
#: generic 10), the default grid (AdaDPSyn and Tang, ε 1 and 4, three seeds, 4 shots).
TICKETS = BUILTIN_TASKS["agnews"].model_copy(update={"name": "custom"})

#: (method, ε, seconds) of every run of a real ``dpsyn advise`` of that walk, in the order they
#: ran: 60 ticket-length AG News records labelled world/sports/business/tech, the packaged
#: Gemma-3-270M on two cores (bench/advise_estimate.py, bench/README.md).
WALK: list[tuple[str | None, float, float]] = [
    (None, 0, 9.5),
    ("adadpsyn", 1, 73.7),
    ("adadpsyn", 1, 69.2),
    ("adadpsyn", 1, 49.8),
    ("adadpsyn", 4, 54.1),
    ("adadpsyn", 4, 59.1),
    ("adadpsyn", 4, 62.3),
    ("tang", 1, 26.5),
    ("tang", 1, 32.7),
    ("tang", 1, 25.6),
    ("tang", 4, 43.0),
    ("tang", 4, 27.0),
    ("tang", 4, 33.0),
]

#: The same walk again, at a lighter load (5.9 min in all, the issue's took 7.9).
QUIETER: list[tuple[str | None, float, float]] = [
    (None, 0, 2.1),
    ("adadpsyn", 1, 37.0),
    ("adadpsyn", 1, 21.7),
    ("adadpsyn", 1, 19.3),
    ("adadpsyn", 4, 32.1),
    ("adadpsyn", 4, 36.4),
    ("adadpsyn", 4, 37.8),
    ("tang", 1, 17.4),
    ("tang", 1, 20.2),
    ("tang", 1, 16.2),
    ("tang", 4, 36.5),
    ("tang", 4, 30.2),
    ("tang", 4, 32.6),
]

#: The same walk with two seeds, on the same machine under a heavier load (bench/README.md).
BUSIER: list[tuple[str | None, float, float]] = [
    (None, 0, 5.3),
    ("adadpsyn", 1, 49.6),
    ("adadpsyn", 1, 48.1),
    ("adadpsyn", 4, 77.4),
    ("adadpsyn", 4, 71.4),
    ("tang", 1, 38.6),
    ("tang", 1, 41.1),
    ("tang", 4, 91.7),
    ("tang", 4, 76.1),
]


def _replay(
    runs: list[tuple[str | None, float, float]], seeds: int = 3
) -> list[tuple[tuple[float, float], float, str]]:
    """After each run: (the range said, the seconds the runs after it really took, the line)."""
    clock = RunEstimate(planned_runs(TICKETS, AdviceConfig(seeds=seeds)))
    said = []
    for index, (method, epsilon, seconds) in enumerate(runs):
        clock.finished(_profile(method, 4, epsilon), seconds)
        bounds, line = clock.remaining(), clock.line()
        if bounds is not None and line is not None:
            said.append((bounds, sum(s for _m, _e, s in runs[index + 1 :]), line))
    return said


def test_the_plan_is_the_walks_thirteen_runs():
    plan = planned_runs(TICKETS, AdviceConfig())
    profiles = [f"{m}/4@{e}" for m in ("adadpsyn", "tang") for e in (1, 4) for _seed in range(3)]
    assert [run.profile for run in plan] == [BASELINE, *profiles]
    assert len(WALK) == len(plan)


@pytest.mark.parametrize(("walk", "seeds"), [(WALK, 3), (QUIETER, 3), (BUSIER, 2)])
def test_from_the_first_measured_prompt_run_every_range_holds_the_walk(walk, seeds):
    """The real walk's durations, replayed: each range printed after a prompt run has ended
    holds the time the rest really took, and is at most 4 times wide, so that its middle is
    within twice that time either way."""
    said = _replay(walk, seeds)
    measured = [(bounds, truth) for bounds, truth, line in said if "guess" not in line]
    assert len(measured) == len(walk) - 2  # after every run but zero-shot and the last
    for (low, high), truth in measured:
        assert low <= truth <= high, (low, truth, high)
        assert high <= 4 * low  # so its middle is within twice the truth either way


@pytest.mark.parametrize("walk", [WALK, QUIETER])
def test_before_any_prompt_run_it_says_a_range_and_that_it_is_a_guess(walk):
    """After zero-shot alone: a range, not a point, that holds the walk's truth, and says it
    is a guess; before any run, nothing (no number comes from nowhere)."""
    clock = RunEstimate(planned_runs(TICKETS, AdviceConfig()))
    assert clock.remaining() is None and clock.line() is None
    (bounds, truth, line), *_rest = _replay(walk)
    low, high = bounds
    assert high > 2 * low and low <= truth <= high
    assert "–" in line and line.endswith(
        "a guess from zero-shot's time until a prompt run is measured"
    )


def test_an_unmeasured_profile_is_priced_from_the_measured_ones_by_size():
    """Tang before any Tang run has ended: AdaDPSyn's measured rate per unit of size, within
    twice either way; its own runs replace that as they end."""
    clock = RunEstimate([PlannedRun(BASELINE, 1), PlannedRun("a/4", 4), PlannedRun("b/14", 14)])
    clock.finished(BASELINE, 1.0)
    clock.finished("a/4", 10.0)
    assert clock.remaining() == pytest.approx((35.0 / 2, 35.0 * 2))
    clock = RunEstimate([PlannedRun("a/4", 4)] * 4)
    clock.finished("a/4", 10.0)
    assert clock.remaining() == pytest.approx((3 * 10 / 1.5, 3 * 10 * 1.5))
    for _ in range(2):
        clock.finished("a/4", 10.0)
    low, high = clock.remaining() or (0, 0)
    assert 10 / 1.5 < low < 10 < high < 15  # three steady runs: narrower than one


def test_another_epsilon_is_priced_by_what_that_epsilon_did_to_another_method():
    """Tang at ε 4 before its first run: Tang's ε 1 runs times AdaDPSyn's ε 4 against its ε 1
    (a planner sizes a job by ε: on the walk, runs at ε 4 took 1.5-2.3 times those at ε 1),
    within 1.6 either way; with no other method measured at both, within 2."""
    plan = [PlannedRun(p, 5.6) for p in ("a/4@1", "a/4@4", "b/4@1", "b/4@4")]
    clock = RunEstimate(plan)
    for profile, seconds in (("a/4@1", 50.0), ("a/4@4", 75.0), ("b/4@1", 40.0)):
        clock.finished(profile, seconds)
    assert clock.remaining() == pytest.approx((60.0 / 1.6, 60.0 * 1.6))
    clock = RunEstimate(plan[2:])
    clock.finished("b/4@1", 40.0)
    assert clock.remaining() == pytest.approx((40.0 / 2, 40.0 * 2))


def test_a_run_slowed_by_load_widens_the_range():
    steady, noisy = RunEstimate([PlannedRun("a/4", 4)] * 5), RunEstimate([PlannedRun("a/4", 4)] * 5)
    for seconds in (20.0, 21.0, 19.0):
        steady.finished("a/4", seconds)
    for seconds in (20.0, 60.0, 19.0):
        noisy.finished("a/4", seconds)
    (s_low, s_high), (n_low, n_high) = steady.remaining() or (0, 0), noisy.remaining() or (0, 0)
    assert n_high / n_low > 1.8 * (s_high / s_low)


@pytest.mark.parametrize(
    ("bounds", "text"),
    [
        ((300.0, 540.0), "about 5–9 min"),
        ((310.0, 530.0), "about 5–9 min"),  # outwards: 5.2 down, 8.8 up
        ((400.0, 440.0), "about 7 min"),  # within a quarter: one figure
        ((100.0, 130.0), "about 100–130 s"),
        ((50.0, 240.0), "about 50 s–4 min"),
        ((4000.0, 20000.0), "about 66 min–5.6 h"),
        ((9000.0, 20000.0), "about 2.5–5.6 h"),
    ],
)
def test_the_range_is_said_rounded_outwards(bounds, text):
    assert say(bounds) == text
