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

What it plans. Coverage checks never won in the planner's simulations once clipping was
among the candidates, so the planner chooses between Tang's mean and a clip radius: one
Gaussian mean per step at Tang's multiplier, over the teachers as they are or clipped
(:data:`CANDIDATES`); a job can still ask for checks with explicit constants.

How it scores. On public synthetic teachers (:mod:`app.privacy.planner_populations`: seven
base regimes and two families of disagreeing groups), each candidate's chance that the noisy
argmax is the teachers' clean argmax is computed per step by :func:`hit_probabilities`: the
same standard normals for every candidate (common random numbers), and the clean token's
own noise integrated out, so that the paired differences against Tang's mean have a small
variance. A candidate is kept only if it is ahead on average and, on the selection's and on
fresh validation teachers, behind Tang's mean in no regime and no family member by more than
one paired standard error and a tenth of a point (:func:`_passes`); see :func:`choose`.
Everything it reads is public: the shape and fixed public seeds. The result depends on (M,
K, sigma rounded to a 2% grid) and is cached.

Where it runs. Never on a request path while the shipped table is current: the shapes that
matter are computed ahead (:func:`shipped_choices`), and every other shape the service
accepts (M up to 200, K up to 1000) is read from the table's nearest shape at Tang's
multiplier scaled by the ratio of the Ms (:func:`nearest_choice`), a lookup, where a
simulation took 2 to 18 s at M 7 to 30 and minutes at M 200 / K 1000. Only the choice of
constants is approximate; the job's price is the accountant's on the constants chosen,
whichever they are. What the approximation costs in agreement: docs/service.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.privacy import planner_cache
from app.privacy.accounting import Accounting
from app.privacy.calibration import calibrate_noise
from app.privacy.geometry import SIMPLEX_DIAMETER, clip_towards_uniform, clipped_diameter
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant, TangParams
from app.privacy.planner_populations import FAMILY, MIXED, REGIMES, Regime
from app.privacy.synthesis import SynthesisPrivacy

# Clip radii (T = 0, no checks): the clipped mean costs what Tang's mean costs. The large
# radii pull in only the surest teachers and gain little, and are what small sigma allows.
CLIPS = (0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
STEPS = {"select": 400, "validate": 400}  # simulated token steps per base regime
FAMILY_STEPS = {"select": 200, "validate": 200}  # ... and per member of a family
NOISE_DRAWS = 2  # noise draws per step (hit_probabilities averages over them)
# The veto's bar: a population vetoes a candidate whose gain there is below -(TOLERANCE
# paired SEs + SLACK). The hit probabilities' small variance (hit_probabilities) makes one SE
# a few hundredths of a point, so the bar is mostly SLACK: a loss of a tenth of a point of
# agreement, twenty times smaller than any evaluation of a prompt can see, does not veto
# the large clip radii that small sigma allows.
TOLERANCE = 1.0
SLACK = 0.001
FINAL_TRIES = 3  # the selection's best candidates offered to the final check, in order
SIGMA_GRID = 1.02  # sigma is rounded to a power of this before simulating (the cache key)
_SEEDS = {"select": 1, "validate": 2}
# The families the veto reads member by member (app/privacy/planner_populations.py).
FAMILIES: dict[str, dict[str, Regime]] = {"disagreeing": FAMILY, "mixed": MIXED}


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
# What the planner chooses from: Tang's mean first (the gains are measured against it), then
# every clip radius. Coverage checks (T > 0) are not planned: in the 1,510 choices of the
# shipped table computed with them among the candidates (2 Dec to 6 Dec), none was chosen;
# a job can still ask for them with explicit constants.
CANDIDATES = (TANG, *(Candidate(0, clip=clip) for clip in CLIPS))


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
        "estimator": "conditional hit probability",
        "steps": STEPS,
        "family_steps": FAMILY_STEPS,
        "noise_draws": NOISE_DRAWS,
        "tolerance": TOLERANCE,
        "slack": SLACK,
        "seeds": _SEEDS,
        "final_tries": FINAL_TRIES,
        "sigma_grid": SIGMA_GRID,
        "candidates": [dataclasses.asdict(c) for c in CANDIDATES],
        "populations": [(group, name) for group, name, _ in populations()],
    }


def remembered_choice(M: int, K: int, bucket: int) -> Choice:
    """:func:`choose`, looked up first in the shipped table (:func:`shipped_choices`), then
    (its own LRU is this process's memory) in the shared store where the service installed one
    (``app.privacy.planner_cache``); a fresh choice is written there for every other process
    and replica."""
    shipped = shipped_choices().get((M, K, bucket))
    if shipped is not None:
        return shipped
    near = nearest_choice(M, K, bucket)
    if near is not None:
        return near
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


# The table last read by _anchors and its anchors, replaced as one tuple (request threads).
_ANCHORS: tuple[object, dict[int, dict[int, range]]] = (None, {})


def _anchors() -> dict[int, dict[int, range]]:
    """The shipped table's shapes (:func:`shipped_choices`): for each K, each M's span of
    buckets; worked out once per table read."""
    global _ANCHORS
    table = shipped_choices()
    held, anchors = _ANCHORS
    if held is not table:
        spans: dict[int, dict[int, list[int]]] = {}
        for M, K, bucket in table:
            spans.setdefault(K, {}).setdefault(M, []).append(bucket)
        anchors = {
            K: {M: range(min(b), max(b) + 1) for M, b in sorted(Ms.items())}
            for K, Ms in sorted(spans.items())
        }
        _ANCHORS = (table, anchors)
    return anchors


def anchor(M: int, K: int) -> tuple[int, int] | None:
    """The table's shape that plans (M, K) when the table does not hold it: the nearest K
    (by ratio; a tie goes to the larger), then the nearest M at that K (by ratio; a tie to
    the larger). None when there is no table."""
    anchors = _anchors()
    if not anchors:
        return None
    K_a = min(anchors, key=lambda k: (abs(math.log(k / K)), -k))
    M_a = min(anchors[K_a], key=lambda m: (abs(math.log(m / M)), -m))
    return M_a, K_a


def nearest_choice(M: int, K: int, bucket: int) -> Choice | None:
    """The choice for a shape the table does not hold, read from the table (no simulation):
    its :func:`anchor` (M_a, K_a) at Tang's multiplier scaled by M_a / M, clamped to the
    table's range of multipliers. None when there is no table.

    Why scaled: a T = 0 step releases the teachers' mean plus Gaussian noise of standard
    deviation sigma * diameter / M, so M teachers at sigma and M_a at sigma * M_a / M put
    the same noise on the same kind of mean; they differ only in how much the teachers'
    own spread averages out. The table agrees: each candidate's range of sigma / M is
    within about 20% from M 6 to M 40. What it costs against the exact simulation of the
    shape: docs/service.md ("Shapes off the table"), bench/planner_anchors.py.
    """
    found = anchor(M, K)
    if found is None:
        return None
    M_a, K_a = found
    span = _anchors()[K_a][M_a]
    shifted = bucket + round(math.log(M_a / M) / math.log(SIGMA_GRID))
    near = shipped_choices()[(M_a, K_a, min(max(shifted, span.start), span.stop - 1))]
    return dataclasses.replace(near, sigma=SIGMA_GRID**bucket)


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
    """The best candidate at multiplier SIGMA_GRID**bucket; Tang's mean unless one validates.

    Two stages on fresh synthetic teachers each (fixed public seeds): a selection ranks the
    clip radii that pass :func:`_passes` by their gain (:func:`_objective`); the first of its
    ``FINAL_TRIES`` best that gains on the validation teachers too and passes :func:`_passes`
    on both stages' steps together is chosen. Offering the final check a few candidates, not
    every radius, keeps the winner's curse of a grid out of it.
    """
    return choose_many(M, K, [bucket])[bucket]


def choose_many(M: int, K: int, buckets: Sequence[int]) -> dict[int, Choice]:
    """:func:`choose` for many buckets of one (M, K), each regime's teachers drawn once: they
    depend on (M, K) only (what the shipped table of :mod:`app.synthesis.planner_table` is
    computed with). Each bucket's choice is computed exactly as a lone one would be."""
    sigmas = [SIGMA_GRID**bucket for bucket in buckets]
    select, validate = (_stage_sums(M, K, sigmas, stage) for stage in ("select", "validate"))
    return {
        bucket: _decide(select[b], validate[b], sigma)
        for b, (bucket, sigma) in enumerate(zip(buckets, sigmas, strict=True))
    }


def populations() -> list[tuple[str, str, Regime]]:
    """(group, name, make) for every population the planner reads: the base regimes (group
    "base"), then each family's members (group: the family's name)."""
    out = [("base", name, make) for name, make in REGIMES.items()]
    for family, members in FAMILIES.items():
        out += [(family, name, make) for name, make in members.items()]
    return out


def _stage_sums(M: int, K: int, sigmas: Sequence[float], stage: str) -> np.ndarray:
    """The stage's sums per bucket, candidate and population (:func:`_sums`), shape
    (buckets, candidates, populations, 4)."""
    seed = _SEEDS[stage]
    out = []
    for index, (group, _, make) in enumerate(populations()):
        steps = STEPS[stage] if group == "base" else FAMILY_STEPS[stage]
        probs = make(M, K, steps, np.random.default_rng([seed, M, K, index]))
        noise = np.random.default_rng([seed, 99, index]).normal(size=(NOISE_DRAWS, steps, K))
        out.append(_sums(probs, noise, sigmas))
    return np.stack(out, axis=2)


def _sums(probs: np.ndarray, noise: np.ndarray, sigmas: Sequence[float]) -> np.ndarray:
    """For each sigma and candidate: the steps, and the sums of the hit probability, of its
    gain over Tang's mean on the same step and noise, and of that gain squared (what a
    paired mean and its standard error need), shape (sigmas, candidates, 4)."""
    S, M = probs.shape[:2]
    clean = probs.mean(1).argmax(-1)
    means = [_released_mean(probs, candidate.clip) for candidate in CANDIDATES]
    out = np.empty((len(sigmas), len(CANDIDATES), 4))
    for b, sigma in enumerate(sigmas):
        scores = [hit_probabilities(m, clean, diameter * sigma / M, noise) for m, diameter in means]
        for i, hits in enumerate(scores):
            gain = hits - scores[0]  # candidate 0 is Tang's mean
            out[b, i] = (S, hits.sum(), gain.sum(), (gain * gain).sum())
    return out


def _released_mean(probs: np.ndarray, clip: float | None) -> tuple[np.ndarray, float]:
    """What a T = 0 job releases a noisy copy of at each step, and its L2 sensitivity times
    M: the teachers' mean (sqrt 2), or the mean of the teachers clipped towards uniform
    (:func:`app.privacy.adadpsyn.clipped_mean_mechanism`'s diameter)."""
    if clip is None:
        return probs.mean(axis=1), SIMPLEX_DIAMETER
    return clip_towards_uniform(probs, clip).mean(axis=1), clipped_diameter(clip, probs.shape[-1])


def hit_probabilities(
    mean: np.ndarray, clean: np.ndarray, scale: float, noise: np.ndarray
) -> np.ndarray:
    """Per step, P(argmax(mean + scale * z) = clean) for z with i.i.d. N(0, 1) coordinates,
    estimated from ``noise`` (draws x steps x K standard normals) without sampling the clean
    token's own coordinate: given every other coordinate's noise, the clean token wins with
    probability Phi((mean_clean - max of the others) / scale), and that conditional
    probability is averaged over the draws. It is unbiased for the hit rate of a T = 0 job
    (its release is this Gaussian mean projected onto the simplex, which keeps the argmax:
    tests/privacy/test_planner.py checks it against the production aggregator) and, as a
    smooth function of the noise, far less variable than the hit itself, so two candidates
    fed the same ``noise`` are compared on paired differences of small variance."""
    rows = np.arange(len(clean))
    top = mean[rows, clean]
    others = mean[None] + scale * noise
    others[:, rows, clean] = -np.inf
    from scipy.special import ndtr  # here: SciPy would cost every process start

    return ndtr((top - others.max(axis=-1)) / scale).mean(axis=0)


def _decide(select: np.ndarray, validate: np.ndarray, sigma: float) -> Choice:
    """The choice from both stages' sums (candidates x populations x 4)."""
    clips = range(1, len(CANDIDATES))
    ranked = sorted((i for i in clips if _passes(select[i])), key=lambda i: -_objective(select[i]))
    both = select + validate
    tang_agreement = _agreement(validate[0])
    for i in ranked[:FINAL_TRIES]:
        if _objective(validate[i]) > 0 and _passes(both[i]):
            return Choice(CANDIDATES[i], sigma, _agreement(validate[i]), tang_agreement)
    return Choice(TANG, sigma, tang_agreement, tang_agreement)


def _by_group(values: np.ndarray) -> float:
    """The average over the base regimes, each family counting as one more regime (the
    average of its members)."""
    groups = [group for group, _, _ in populations()]
    base = [float(v) for v, g in zip(values, groups, strict=True) if g == "base"]
    families = [
        float(np.mean([v for v, g in zip(values, groups, strict=True) if g == family]))
        for family in FAMILIES
    ]
    return float(np.mean(base + families))


def _objective(sums: np.ndarray) -> float:
    """The mean gain over Tang's mean by :func:`_by_group` (what the selection ranks by)."""
    return _by_group(sums[:, 2] / sums[:, 0])


def _agreement(sums: np.ndarray) -> float:
    """The simulated P(noisy argmax = clean argmax), by :func:`_by_group`."""
    return _by_group(sums[:, 1] / sums[:, 0])


def _passes(sums: np.ndarray) -> bool:
    """Ahead on average, and behind in no population by more than ``TOLERANCE`` paired SEs
    and ``SLACK``: a loss in one regime or family member is not bought back by gains in the
    others."""
    if _objective(sums) <= 0:
        return False
    n, gain, square = sums[:, 0], sums[:, 2], sums[:, 3]
    mean = gain / n
    se = np.sqrt(np.maximum(square - n * mean**2, 0.0) / (n - 1) / n)
    return bool(np.all(mean + TOLERANCE * se >= -SLACK))
