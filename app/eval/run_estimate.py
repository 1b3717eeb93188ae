"""How long the rest of a batch of runs will take, from the runs already measured.

Why. ``dpsyn advise`` once priced every run of the token loop a priori, as a count of
teacher passes times zero-shot's time per query: a batched forward pass of M teachers costs
far less than M scoring passes, so on a 4-label task it said "the rest about 2.9 h" for
a grid that took 7.9 min. No a-priori cost per pass holds across models, machines and the
load beside them; the runs themselves measure it.

How. Every planned run has a *profile* (runs of one profile do the same work: one method
at one shape and one epsilon, "adadpsyn/4@1"; the seed aside), whose *family* is the part
before "@" (the epsilon changes a planned method's shape, not its kind of work), and a
*size* (its a-priori work in zero-shot units, used only to carry a measured rate over to a
profile not yet measured). The rest is the sum of the remaining runs, each priced by the
best measurement it has:

1. its own profile's measured runs: their mean, within a factor ``1 + c / sqrt(n)`` either
   way (``c`` the larger of 0.5 and twice their coefficient of variation: one run leaves a
   factor 1.5, three steady ones about 1.3);
2. else its family's measured runs (the same method at another epsilon), per unit of size:
   times what that change of epsilon did to another method measured at both, within a
   factor :data:`CROSSED_SPREAD` either way; without such a method, within a factor
   :data:`FAMILY_SPREAD`;
3. else the measured runs of the other prompt profiles (those at its epsilon where there
   are some), per unit of size, within a factor 2 either way (a method's run may cost twice
   or half what its size says);
4. else zero-shot's measured time times the run's size: a guess within a factor
   :data:`PRIOR_SPREAD` either way, replaced as soon as one prompt run ends.

Lower and upper ends are summed separately (a busy machine slows every run at once, so
the errors add up rather than cancel). The range is printed as a range while its ends are
more than a quarter apart, as one figure once they are not (:func:`say`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Zero-shot's profile: the prior prices the other runs in its measured time.
BASELINE = "zero-shot"
#: The factor either way of a run priced only by its a-priori size (no prompt run measured).
PRIOR_SPREAD = 2.8
#: The factor either way of a run priced by its family's runs at another variant (a method at
#: another ε: its planner sizes the job by ε; runs at ε 4 took 1.5 to 2.3 times those at ε 1).
FAMILY_SPREAD = 2.0
#: ... and where another family measured at both variants says what the change of variant does.
CROSSED_SPREAD = 1.6
#: The factor either way of a run priced by another profile's measured rate.
BORROWED_SPREAD = 2.0
#: The least relative spread a measured profile keeps (one run is not a distribution).
MIN_SPREAD = 0.5
#: Ends closer than this ratio are said as one figure ("about 7 min").
POINT_RATIO = 1.25


@dataclass(frozen=True)
class PlannedRun:
    """One run still to come: its profile (runs that do the same work) and its a-priori size
    in zero-shot units (zero-shot itself is 1)."""

    profile: str
    size: float


class RunEstimate:
    """The remaining runs of a batch and the durations of those that ended, in order to say
    how long the rest will take (see the module)."""

    def __init__(self, planned: Sequence[PlannedRun]) -> None:
        self._left = list(planned)
        self._seconds: dict[str, list[float]] = {}
        self._sizes: dict[str, float] = {}

    def finished(self, profile: str, seconds: float) -> None:
        """Record one ended run of ``profile`` and strike it off the plan (the first planned
        run of that profile: runs of one profile are alike)."""
        index = next((i for i, run in enumerate(self._left) if run.profile == profile), None)
        if index is not None:
            self._sizes.setdefault(profile, self._left.pop(index).size)
        self._seconds.setdefault(profile, []).append(max(seconds, 0.0))

    @property
    def runs_left(self) -> int:
        return len(self._left)

    def remaining(self) -> tuple[float, float] | None:
        """(lower, upper) seconds of the runs left; None before any run is measured (nothing
        on this machine says how fast it is yet)."""
        if not self._seconds:
            return None
        low = high = 0.0
        for run in self._left:
            centre, spread = self._price(run)
            low += centre / spread
            high += centre * spread
        return low, high

    def line(self) -> str | None:
        """ "the rest about 5–9 min (11 runs)", saying when it is only the prior's guess; None
        before any run is measured or after the last."""
        bounds = self.remaining()
        if bounds is None or not self._left:
            return None
        left = len(self._left)
        text = f"the rest {say(bounds)} ({left} run{'' if left == 1 else 's'})"
        if set(self._seconds) <= {BASELINE}:
            text += ": a guess from zero-shot's time until a prompt run is measured"
        return text

    def _price(self, run: PlannedRun) -> tuple[float, float]:
        """(seconds, factor either way) for one remaining run: rules 1-4 of the module."""
        own = self._seconds.get(run.profile)
        if own:
            mean = float(np.mean(own))
            cv = float(np.std(own, ddof=1)) / mean if len(own) > 1 and mean > 0 else 0.0
            return mean, 1.0 + max(MIN_SPREAD, 2.0 * cv) / math.sqrt(len(own))
        family, _at, variant = run.profile.partition("@")
        kin = [p for p in self._seconds if p.partition("@")[0] == family]
        if kin:
            crossed = self._crossed(family, variant, kin)
            if crossed is not None:
                return run.size * crossed, CROSSED_SPREAD
            return run.size * self._rate(kin), FAMILY_SPREAD
        prompts = [p for p in self._seconds if p != BASELINE]
        alike = [p for p in prompts if p.partition("@")[2] == variant]
        if prompts:
            return run.size * self._rate(alike or prompts), BORROWED_SPREAD
        return run.size * self._rate([BASELINE]), PRIOR_SPREAD

    def _crossed(self, family: str, variant: str, kin: Sequence[str]) -> float | None:
        """Seconds per unit of size of ``family`` at ``variant``, from its own runs at another
        variant times what that change of variant did to another family measured at both
        (Tang at ε 4 from Tang at ε 1 and AdaDPSyn's ε 4 against its ε 1); None when no
        other family was measured at both."""
        ratios = []
        for own in kin:
            other = own.partition("@")[2]
            for profile in self._seconds:
                name = profile.partition("@")[0]
                there = f"{name}@{variant}"
                if name != family and profile.endswith(f"@{other}") and there in self._seconds:
                    ratios.append(self._rate([own]) * self._rate([there]) / self._rate([profile]))
        return float(np.mean(ratios)) if ratios else None

    def _rate(self, profiles: Sequence[str]) -> float:
        """Measured seconds per unit of a-priori size over the runs of ``profiles``."""
        seconds = sum(sum(self._seconds.get(p, [])) for p in profiles)
        size = sum(self._sizes.get(p, 1.0) * len(self._seconds.get(p, [])) for p in profiles)
        return seconds / size if size > 0 else 0.0


def say(bounds: tuple[float, float]) -> str:
    """ "about 5–9 min" while the ends are apart, "about 7 min" once they agree: the lower
    end rounded down and the upper up, so that rounding never narrows the range; each end in
    its own unit where they differ ("about 50 s–3 min")."""
    low, high = bounds
    if high <= low * POINT_RATIO:
        middle = (low + high) / 2
        return f"about {_figure(middle, round)} {_unit(middle)[0]}"
    lower = _figure(low, math.floor, _unit(high)[1])
    upper = _figure(high, math.ceil)
    if _unit(low)[0] != _unit(high)[0]:
        return f"about {_figure(low, math.floor)} {_unit(low)[0]}–{upper} {_unit(high)[0]}"
    if lower == upper:
        return f"about {lower} {_unit(high)[0]}"
    return f"about {lower}–{upper} {_unit(high)[0]}"


def _unit(seconds: float) -> tuple[str, float]:
    """Seconds below 3 minutes (whole minutes would widen 100–130 s to 1–3 min), minutes
    below 90, hours beyond."""
    if seconds < 180:
        return "s", 1.0
    if seconds < 5400:
        return "min", 60.0
    return "h", 3600.0


def _figure(seconds: float, rounding: Callable[[float], int], per: float | None = None) -> str:
    """``seconds`` in its unit (or per ``per`` seconds): whole seconds and minutes, hours to
    one decimal."""
    per = _unit(seconds)[1] if per is None else per
    if per == 3600.0:
        return f"{rounding(seconds / per * 10) / 10:.1f}"
    return f"{max(rounding(seconds / per), 0)}"
