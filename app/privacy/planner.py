"""AdaDPSyn's constants chosen from a job's public shape, by simulation on synthetic teachers.

Why a planner. Every token step of AdaDPSyn composes T + 1 projected means and T coverage
checks into one Gaussian mechanism (Gaussian DP composition), and the accountant prices only
that composition. So for a given shape (M, N, tmax, shots and records per label, epsilon,
delta, accounting) the step's whole budget is fixed: it is the budget of Tang et al.'s single
noisy mean at the calibrated multiplier ``sigma``, mu^2 = 1 / sigma^2. The constants only
decide how it is split: a share ``check_share`` goes to the T coverage checks, the rest to the
T + 1 means. Checks pay for themselves only when they let later means run in a small ball,
which depends on M, K and sigma. With no checks (T = 0) the pooled aggregator *is* Tang's
mean, so "never worse than Tang" is always available. A clip radius is the other constant:
the means that no passed check projects may average the teachers clipped towards the uniform
distribution, at the same multiplier (the same price) and a smaller sensitivity
(:func:`app.privacy.adadpsyn.clipped_mean_mechanism`); it costs no budget, only a bias
between confident and unsure teachers, which is what the simulation weighs.

The planner simulates candidate splits on public synthetic teachers (seven regimes, from
agreeing to a confident majority with a scattered minority, a two-way split and diffuse),
with the production aggregator (:func:`app.privacy.adadpsyn.pooled_aggregate_steps`), scores
the probability that the noisy argmax equals the teachers' clean argmax, and keeps the best
candidate only if it also beats T = 0 on fresh validation teachers on average and in every
regime (within one paired standard error); see :func:`choose`. Everything it reads is
public: the shape and fixed public seeds. The result depends on (M, K, sigma rounded to a 2%
grid) and is cached.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.privacy import planner_cache
from app.privacy.accounting import Accounting
from app.privacy.adadpsyn import pooled_aggregate_steps
from app.privacy.calibration import calibrate_noise
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant, TangParams
from app.privacy.synthesis import SynthesisPrivacy

# The candidate grid: rounds, the checks' share of the step's mu^2, the coverage fraction,
# the false-pass margin and the shrink factor (no GoodRadius: docs/privacy.md, "AdaDPSyn
# variants", point 6). Kept small for planning time: in our sweeps (M = 10, K = 50) T = 3
# gained at most 0.006 in agreement over T = 2, and shrink 0.3 never led.
GRID = {
    "T": (1, 2),
    "check_share": (0.03, 0.1, 0.25),
    "mu": (0.5, 0.9),
    "margin": (0.0, 1.0),
    "shrink": (0.5, 0.7, 0.85),
}
# Clip radii tried without checks (T = 0): the clipped mean costs what Tang's mean costs.
CLIPS = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
STEPS = {"screen": 150, "select": 400, "validate": 400}  # simulated token steps per regime
# ... and per member of the disagreeing-mixture family, which only the veto reads (a clip's
# loss there is the flip of a clean argmax, large and plain on a hundred steps).
FAMILY_STEPS = {"screen": 0, "select": 300, "validate": 300}
# The family's veto bar, in paired SEs (the base regimes' is 1): stricter, because its close
# calls (a clip that turns the argmax in a fraction of the steps) lose a few points, which
# one SE of 600 steps hides about half the time; the price is an occasional clip vetoed
# where it would only have tied.
FAMILY_TOLERANCE = 0.5
SHORTLIST = 4  # candidates the screen passes on to the selection
FINAL_TRIES = 3  # the selection's best candidates offered to the final check, in order
# A coverage check whose count noise (std sigma2) exceeds a fifth of the M teachers cannot
# tell "all in" from "half in": it passes around a wrong centre about as often as around the
# right one, and such a pass pulls every teacher towards the wrong token. Never planned.
MAX_CHECK_NOISE = 0.2
SIGMA_GRID = 1.02  # sigma is rounded to a power of this before simulating (the cache key)
_SEEDS = {"screen": 3, "select": 1, "validate": 2}


class PlannerShape(BaseModel):
    """The public shape of a token-loop job: everything its privacy cost depends on, and K."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    M: int = Field(ge=1, le=1000)
    K: int = Field(ge=2, le=1000)
    N: int = Field(ge=1, le=100)
    tmax: int = Field(ge=1, le=1000)
    label_sizes: Mapping[str, int]
    shots: Mapping[str, int]
    epsilon: float = Field(gt=0.0, allow_inf_nan=False)
    delta: float = Field(gt=0.0, lt=1.0)
    accounting: Accounting = Accounting.TIGHT
    # A count release priced inside the job (jobs planned before the dataset-level release
    # only; app.privacy.unit), part of the price every candidate pays.
    count_sigma: float | None = Field(None, gt=0.0)


Regime = Callable[[int, int, int, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class Candidate:
    """One split of a step's budget; T = 0 is Tang's mean."""

    T: int
    check_share: float = 0.0
    mu: float = 0.5
    shrink: float = 0.5
    margin: float = 0.0
    clip: float | None = None  # the unprojected means clip teachers towards uniform

    def params(self, sigma: float) -> AdaDPSynParams:
        """The pooled parameters that spend exactly the budget of Tang's mean at ``sigma``:
        (T + 1) / sigma1^2 + T / sigma2^2 = 1 / sigma^2, the checks taking ``check_share``."""
        if self.T == 0:
            return AdaDPSynParams(
                variant=AdaDPSynVariant.POOLED,
                good_radius=False,
                T=0,
                sigma1=sigma,
                clip=self.clip,
            )
        return AdaDPSynParams(
            variant=AdaDPSynVariant.POOLED,
            good_radius=False,
            T=self.T,
            sigma1=sigma * math.sqrt((self.T + 1) / (1.0 - self.check_share)),
            sigma2=sigma * math.sqrt(self.T / self.check_share),
            mu=self.mu,
            shrink=self.shrink,
            coverage_margin=self.margin,
            clip=self.clip,
        )


TANG = Candidate(T=0)
CLIP_ONLY = tuple(Candidate(0, clip=clip) for clip in CLIPS)
CANDIDATES = (
    TANG,
    *CLIP_ONLY,
    *(
        Candidate(int(T), share, mu, shrink, margin)
        for T in GRID["T"]
        for share in GRID["check_share"]
        for mu in GRID["mu"]
        for shrink in GRID["shrink"]
        for margin in GRID["margin"]
    ),
)


@dataclass(frozen=True)
class Choice:
    """The planner's choice for one shape, with the simulated agreements behind it."""

    candidate: Candidate
    sigma: float  # Tang's multiplier for the shape: the step's whole budget
    agreement: float  # validation: mean over regimes of P(noisy argmax = clean argmax)
    tang_agreement: float  # the same for T = 0 on the same teachers and noise seeds

    def params(self) -> AdaDPSynParams:
        """The chosen parameters; their sigma1 spends the whole budget of the step, and the
        job's calibration refines it against the accountant."""
        return self.candidate.params(self.sigma)

    def public_stats(self) -> dict[str, float | int | bool]:
        """What a job reports about the choice (functions of public inputs only)."""
        c = self.candidate
        return {
            "planner_T": c.T,
            "planner_checks": c.T > 0,
            "planner_check_share": c.check_share,
            "planner_mu": c.mu if c.T else 0.0,
            "planner_shrink": c.shrink if c.T else 0.0,
            "planner_margin": c.margin if c.T else 0.0,
            "planner_clip": c.clip if c.clip is not None else 0.0,
            "planner_tang_sigma": round(self.sigma, 6),
            "planner_agreement": round(self.agreement, 4),
            "planner_tang_agreement": round(self.tang_agreement, 4),
        }


def tang_multiplier(shape: PlannerShape) -> float:
    """Tang et al.'s calibrated multiplier for the shape: the budget of one token step."""
    privacy = SynthesisPrivacy(
        params=TangParams(sigma=1.0),
        accounting=shape.accounting,
        M=shape.M,
        N=shape.N,
        tmax=shape.tmax,
        count_sigma=shape.count_sigma,
    )
    return calibrate_noise(
        privacy,
        label_sizes=shape.label_sizes,
        shots=shape.shots,
        target_epsilon=shape.epsilon,
        delta=shape.delta,
    ).multiplier


def plan_adadpsyn(shape: PlannerShape) -> Choice:
    """The constants that maximise simulated argmax agreement for ``shape`` (public only).

    The simulation runs at Tang's multiplier rounded to the grid (the cache key); the choice
    returned carries the exact multiplier, so that T = 0 is Tang's calibrated mechanism itself.
    """
    return choose_at(shape.M, shape.K, tang_multiplier(shape))


def choose_at(M: int, K: int, sigma: float) -> Choice:
    """:func:`choose` at Tang's multiplier ``sigma`` (rounded to the grid for the
    simulation), carrying ``sigma`` itself; remembered by every process
    (:func:`remembered_choice`)."""
    bucket = round(math.log(sigma) / math.log(SIGMA_GRID))
    return dataclasses.replace(remembered_choice(M, K, bucket), sigma=sigma)


@functools.cache
def _constants() -> dict[str, Any]:
    """Everything besides the shape that :func:`choose` reads: part of its cache key."""
    return {
        "steps": STEPS,
        "family_steps": FAMILY_STEPS,
        "seeds": _SEEDS,
        "shortlist": SHORTLIST,
        "final_tries": FINAL_TRIES,
        "max_check_noise": MAX_CHECK_NOISE,
        "sigma_grid": SIGMA_GRID,
        "candidates": [dataclasses.asdict(c) for c in CANDIDATES],
        "clip_only": [dataclasses.asdict(c) for c in CLIP_ONLY],
        "regimes": sorted(REGIMES),
    }


def remembered_choice(M: int, K: int, bucket: int) -> Choice:
    """:func:`choose`, looked up first in the shipped table (:func:`shipped_choices`), then
    (its own LRU is this process's memory) in the shared store where the service installed one
    (``app.privacy.planner_cache``); a fresh choice is written there for every other process
    and replica."""
    shipped = shipped_choices().get((M, K, bucket))
    if shipped is not None:
        return shipped
    store = planner_cache.current_store()
    if store is None:
        return choose(M, K, bucket)
    key = planner_cache.choice_key({"M": M, "K": K, "bucket": bucket}, _constants())
    stored = store.get(key)
    if stored is not None:
        return _decoded(stored)
    choice = choose(M, K, bucket)
    store.put(key, _encoded(choice))
    return choice


#: Choices computed ahead for the shapes that matter (``python -m app.synthesis.planner_table``).
TABLE = Path(__file__).with_name("planner_table.json")


def fingerprint() -> str:
    """What a table of choices must have been computed with to be read: the planner's
    constants and the cache version, hashed."""
    return planner_cache.choice_key({}, _constants())


@functools.cache
def shipped_choices() -> dict[tuple[int, int, int], Choice]:
    """The table shipped with the package, by (M, K, bucket): exactly what :func:`choose`
    returns for those shapes (tests/privacy/test_planner_table.py recomputes a sample), read
    once. Empty when the file is missing or was computed by another planner (its
    fingerprint differs): the shapes are then planned as any other."""
    try:
        document = json.loads(TABLE.read_text())
    except FileNotFoundError:
        return {}
    if document.get("fingerprint") != fingerprint():
        return {}
    out = {}
    for shape in document["shapes"]:
        M, K, first = shape["M"], shape["K"], shape["first_bucket"]
        for offset, (index, agreement, tang_agreement) in enumerate(shape["choices"]):
            bucket = first + offset
            out[(M, K, bucket)] = Choice(
                CANDIDATES[index], SIGMA_GRID**bucket, agreement, tang_agreement
            )
    return out


def _encoded(choice: Choice) -> dict[str, Any]:
    return {
        "candidate": dataclasses.asdict(choice.candidate),
        "sigma": choice.sigma,
        "agreement": choice.agreement,
        "tang_agreement": choice.tang_agreement,
    }


def _decoded(stored: Mapping[str, Any]) -> Choice:
    return Choice(
        candidate=Candidate(**stored["candidate"]),
        sigma=float(stored["sigma"]),
        agreement=float(stored["agreement"]),
        tang_agreement=float(stored["tang_agreement"]),
    )


def calibrated_pair(shape: PlannerShape) -> tuple[AdaDPSynParams, AdaDPSynParams]:
    """Tang's mean (the pooled variant with T = 0 and no clip: Tang's mechanism draw for
    draw) and the planned choice for ``shape``, each calibrated to its epsilon as a job is;
    what the bench and the tests compare on the same teachers and noise."""
    tang = TANG.params(1.0)
    out = []
    for params in (tang, plan_adadpsyn(shape).params()):
        privacy = SynthesisPrivacy(
            params=params, M=shape.M, N=shape.N, tmax=shape.tmax, count_sigma=shape.count_sigma
        )
        result = calibrate_noise(
            privacy,
            label_sizes=shape.label_sizes,
            shots=shape.shots,
            target_epsilon=shape.epsilon,
            delta=shape.delta,
        ).privacy.params
        assert isinstance(result, AdaDPSynParams)
        out.append(result)
    return out[0], out[1]


@functools.lru_cache(maxsize=512)
def choose(M: int, K: int, bucket: int) -> Choice:
    """The best candidate at multiplier SIGMA_GRID**bucket; T = 0 unless one validates.

    Three stages on fresh synthetic teachers each (fixed public seeds): a screen of every
    candidate on a few steps keeps the ``SHORTLIST`` best by mean gain over T = 0, and every
    clip radius joins them; a selection on more steps ranks those that pass :func:`_beats`;
    the first of its ``FINAL_TRIES`` best that is ahead on the validation teachers and passes
    :func:`_beats` on selection and validation together is chosen. Offering the final check
    at most three candidates, not the grid, keeps the winner's curse of a large grid out of it.
    """
    return _choose(teacher_stages(M, K), M, SIGMA_GRID**bucket)


def choose_many(M: int, K: int, buckets: Sequence[int]) -> dict[int, Choice]:
    """:func:`choose` for many buckets of one (M, K), the synthetic teachers drawn once: they
    depend on (M, K) only, and drawing them is most of a single choice's time (what the
    shipped table of :mod:`app.synthesis.planner_table` is computed with)."""
    stages = teacher_stages(M, K)
    return {bucket: _choose(stages, M, SIGMA_GRID**bucket) for bucket in buckets}


def teacher_stages(M: int, K: int) -> dict[str, list[np.ndarray]]:
    """Each stage's synthetic teachers (fixed public seeds; independent of sigma)."""
    return {
        name: _teacher_sets(M, K, STEPS[name], FAMILY_STEPS[name], _SEEDS[name]) for name in STEPS
    }


def _choose(stages: Mapping[str, list[np.ndarray]], M: int, sigma: float) -> Choice:
    usable = [
        c for c in CANDIDATES[1:] if c.T == 0 or c.params(sigma).sigma2 <= MAX_CHECK_NOISE * M
    ]
    shortlist = _Stage(stages, sigma, "screen").ranked(usable, tolerance=math.inf)
    finalists = [c for c, _ in shortlist[:SHORTLIST]]
    # every clip radius reaches the selection: the smaller radii gain most on average, so a
    # top-by-gain shortlist would hold only those, and they are the ones a regime vetoes
    finalists += [c for c in CLIP_ONLY if c not in finalists]
    select = _Stage(stages, sigma, "select")
    ranked = select.ranked(finalists, tolerance=1.0)
    validate = _Stage(stages, sigma, "validate")
    tang_mean = float(np.mean([s.mean() for s in validate.tang]))
    tang_both = [np.concatenate(p) for p in zip(select.tang, validate.tang, strict=True)]
    for best, selected in ranked[:FINAL_TRIES]:
        held_out = validate.scores(best)
        # The final check pools selection and validation steps (800 per regime), so that a
        # regime with no real difference rarely vetoes by chance and a real loss rarely hides.
        both = [np.concatenate(pair) for pair in zip(selected, held_out, strict=True)]
        if _mean_gain(held_out, validate.tang) > 0 and _beats(both, tang_both, tolerance=1.0):
            agreement = float(np.mean([s.mean() for s in held_out]))
            return Choice(best, sigma, agreement, tang_mean)
    return Choice(TANG, sigma, tang_mean, tang_mean)


class _Stage:
    """One stage's synthetic teachers (fixed public seed) and T = 0's agreement on them."""

    def __init__(self, stages: Mapping[str, list[np.ndarray]], sigma: float, name: str) -> None:
        self.sigma, self.seed = sigma, _SEEDS[name]
        self.sets = stages[name]
        self.tang = self.scores(TANG)

    def scores(self, candidate: Candidate) -> list[np.ndarray]:
        return _agreements(candidate.params(self.sigma), self.sets, self.seed)

    def ranked(
        self, candidates: Sequence[Candidate], tolerance: float
    ) -> list[tuple[Candidate, list[np.ndarray]]]:
        """``candidates`` that pass :func:`_beats` here, with their scores, best mean gain
        first."""
        scored = [(c, self.scores(c)) for c in candidates]
        passed = [(c, s) for c, s in scored if _beats(s, self.tang, tolerance)]
        return sorted(passed, key=lambda pair: -_mean_gain(pair[1], self.tang))


def _mean_gain(ours: list[np.ndarray], tang: list[np.ndarray]) -> float:
    """The gain over T = 0 averaged over the base regimes, the family counting as one more
    (the average of its members): the objective. The veto (:func:`_beats`) takes every
    member on its own."""
    gains = [a.mean() - b.mean() for a, b in zip(ours, tang, strict=True)]
    base, family = gains[: len(REGIMES)], gains[len(REGIMES) :]
    return float(np.mean(base + ([float(np.mean(family))] if family else [])))


def _beats(ours: list[np.ndarray], tang: list[np.ndarray], tolerance: float) -> bool:
    """Ahead on average over regimes, and behind in none by more than ``tolerance`` paired
    SEs (a family member: :data:`FAMILY_TOLERANCE` at most): a loss in one regime is not
    bought back by gains in the others."""
    if _mean_gain(ours, tang) <= 0:
        return False
    if math.isinf(tolerance):
        return True
    gains = [a - b for a, b in zip(ours, tang, strict=True)]
    bars = [tolerance] * len(REGIMES) + [min(tolerance, FAMILY_TOLERANCE)] * len(FAMILY)
    return all(
        g.mean() >= -bar * g.std(ddof=1) / math.sqrt(g.size)
        for g, bar in zip(gains, bars, strict=False)
    )


def _agreements(params: AdaDPSynParams, sets: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """Per regime, 1.0 where the aggregate's argmax equals the clean mean's, else 0.0."""
    rng = np.random.default_rng([seed, 99])  # the same noise stream for every candidate
    out = []
    for probs in sets:
        released = pooled_aggregate_steps(probs, params, rng).distributions
        out.append((released.argmax(-1) == probs.mean(1).argmax(-1)).astype(float))
    return out


def _teacher_sets(M: int, K: int, steps: int, family_steps: int, seed: int) -> list[np.ndarray]:
    """One ``steps`` x M x K stack of synthetic next-token distributions per regime: the
    base regimes first, then the disagreeing-mixture family's members."""
    base = [
        make(M, K, steps, np.random.default_rng([seed, M, K, index]))
        for index, make in enumerate(REGIMES.values())
    ]
    if not family_steps:
        return base
    return base + [
        make(M, K, family_steps, np.random.default_rng([seed, M, K, len(REGIMES) + index]))
        for index, make in enumerate(FAMILY.values())
    ]


def _peaked(rng: np.random.Generator, shape: tuple[int, ...], K: int) -> np.ndarray:
    """Distributions with one likely token (probability 0.3 to 0.95) and the rest spread
    unevenly, as a language model's next-token distributions often are."""
    rest = rng.dirichlet(np.full(K, 0.1), size=shape)
    top = rng.uniform(0.3, 0.95, size=(*shape, 1))
    token = rng.integers(K, size=shape)
    spike = np.zeros((*shape, K))
    np.put_along_axis(spike, token[..., None], 1.0, axis=-1)
    return top * spike + (1.0 - top) * rest


def _around(rng: np.random.Generator, base: np.ndarray, concentration: float) -> np.ndarray:
    """Dirichlet draws centred on ``base`` (per row), ``concentration`` its sharpness."""
    draws = rng.gamma(concentration * base + 1e-3)
    return draws / draws.sum(axis=-1, keepdims=True)


def _agreeing(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    base = _peaked(rng, (S, 1), K).repeat(M, axis=1)
    return _around(rng, base, 40.0)


def _agreeing_flat(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    """Agreeing teachers around a distribution with no dominant token (Dirichlet(0.2))."""
    base = rng.dirichlet(np.full(K, 0.2), size=(S, 1)).repeat(M, axis=1)
    return _around(rng, base, 40.0)


def _majority(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    """About 70% of the teachers near one distribution, the rest each on its own."""
    shared = _peaked(rng, (S, 1), K).repeat(M, axis=1)
    own = _peaked(rng, (S, M), K)
    base = np.where(rng.random((S, M, 1)) < 0.7, shared, own)
    return _around(rng, base, 40.0)


def _confident_majority(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    """About 60% of the teachers confident (0.75) in one token, each of the others as
    confident in a token of its own: a false coverage pass around a wrong centre costs most
    here, and Tang's mean is already right most of the time."""
    tokens = np.where(
        rng.random((S, M)) < 0.6, rng.integers(K, size=(S, 1)), rng.integers(K, size=(S, M))
    )
    base = np.full((S, M, K), 0.25 / (K - 1))
    np.put_along_axis(base, tokens[..., None], 0.75, axis=-1)
    return _around(rng, base, 25.0)


def _split(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    first, second = _peaked(rng, (S, 1), K), _peaked(rng, (S, 1), K)
    base = np.where(rng.random((S, M, 1)) < 0.55, first, second)
    return _around(rng, base, 40.0)


def _close(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    """Every teacher near one distribution whose top two tokens are close: the model's own
    uncertainty, whatever the examples."""
    base = 0.5 * _peaked(rng, (S, 1), K) + 0.5 * _peaked(rng, (S, 1), K)
    return _around(rng, base.repeat(M, axis=1), 60.0)


def _diffuse(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
    base = rng.dirichlet(np.ones(K), size=(S, 1)).repeat(M, axis=1)
    return _around(rng, base, float(K))


def mixture(share: float, lean: float) -> Regime:
    """The disagreeing-mixture regime: a ``share`` of the teachers confident (0.7 to 0.95)
    in one token, the others unsure, each giving ``lean`` (plus a flat spread of the rest)
    to another token. Clipping towards uniform shrinks the confident teachers and leaves
    the unsure ones alone, so in the middle of this family the clipped mean's argmax is the
    unsure majority's token where the plain mean's is the confident minority's."""

    def make(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
        count = max(1, round(share * M))
        confident = rng.permuted(np.tile(np.arange(M) < count, (S, 1)), axis=1)
        first, second = _two_tokens(rng, S, K)
        top = rng.uniform(0.7, 0.95, size=(S, M, 1))
        sure = _with_mass(rng.dirichlet(np.full(K, 0.5), size=(S, M)), first, top)
        unsure = _with_mass(rng.dirichlet(np.ones(K), size=(S, M)), second, lean)
        return _around(rng, np.where(confident[..., None], sure, unsure), 60.0)

    return make


def _with_mass(rest: np.ndarray, token: np.ndarray, mass: float | np.ndarray) -> np.ndarray:
    """``mass`` on ``token`` (one per step) and ``rest`` scaled into the remainder."""
    out = (1.0 - mass) * rest
    out[np.arange(len(token)), :, token] += np.broadcast_to(mass, out.shape)[..., 0]
    return out


def _two_tokens(rng: np.random.Generator, S: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Two different tokens per step."""
    first = rng.integers(K, size=S)
    second = (first + rng.integers(1, K, size=S)) % K
    return first, second


# The family's grid the planner checks its choice on: confident shares 10% to 60%, denser
# unsure teachers' lean from barely there (0.05 over a flat spread) to strong (0.5).
FAMILY_SHARES = (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6)
FAMILY_LEANS = (0.05, 0.15, 0.25, 0.35, 0.5)
FAMILY: dict[str, Regime] = {
    f"mixture_{share:g}_{lean:g}": mixture(share, lean)
    for share in FAMILY_SHARES
    for lean in FAMILY_LEANS
}

REGIMES: dict[str, Regime] = {
    "agreeing": _agreeing,
    "agreeing_flat": _agreeing_flat,
    "majority": _majority,
    "confident_majority": _confident_majority,
    "split": _split,
    "close": _close,
    "diffuse": _diffuse,
}
