"""Confident-GNMax (Papernot et al. 2018) and the Gaussian DP filter that bounds a PromptPATE job.

PromptPATE (Duan et al. 2023) asks an ensemble of teachers, each a prompt built from its own
disjoint share of the private records, to label public inputs. For one public input the
teachers' answers form a vote histogram ``n`` (one count per label). Confident-GNMax answers
only confident queries:

1. **threshold check**: release ``max_j n_j + N(0, sigma_threshold^2)``; if it is below the
   threshold the query gets no label;
2. **GNMax**: otherwise release ``argmax_j (n_j + N(0, sigma_gnmax^2))`` as the label.

Neighbouring relation and sensitivity. Records are assigned to teachers by a keyed hash of
the record with a secret per-job key (``app.pate.teachers``), so the assignment of a record
never depends on the other records. Under **add/remove** one record changes the prompt of at
most one teacher: that teacher's vote moves from one label to another (or appears or
disappears, if its share was short of records). Hence the max count moves by at most 1 and
the histogram by at most sqrt(2) in L2. A **replace-one** neighbour is a removal plus an
addition, which can change two teachers: the max count moves by at most 2 and the histogram
by at most 2 sqrt(2) (both teachers may move their vote between the same two labels).

Privacy of a whole job. Both steps are Gaussian mechanisms, so a threshold check is
``mu_T``-GDP with ``mu_T = sensitivity_T / sigma_threshold`` and a GNMax release is
``mu_G``-GDP likewise. Which queries pass the check depends on the data, so the number of
GNMax releases is random; a Gaussian DP *filter* handles exactly this: an analyst that picks
each next mechanism from the answers so far and stops before ``sum mu_i^2`` would exceed
``mu^2`` runs a ``mu``-GDP interaction (Smith and Thakurta 2022, "Fully adaptive composition
for Gaussian differential privacy"). The job is charged the filter's budget ``mu`` (a
data-independent guarantee), never the realised sum, which depends on the data. Papernot et
al.'s data-dependent analysis would charge less but is only a guarantee when its value is
released through smooth sensitivity; it is not implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.privacy.accounting import Accounting, accountant_for
from app.privacy.budget import is_epsilon
from app.privacy.calibration import CalibrationError
from app.privacy.events import PateEvent
from app.privacy.mechanisms import GaussianMechanism, Relation
from app.privacy.noise_search import smallest_noise

# max count and histogram (L2) sensitivity of the vote of a keyed-hash teacher ensemble
_SENSITIVITY = {
    Relation.ADD_OR_REMOVE: (1.0, math.sqrt(2.0)),
    Relation.REPLACE_ONE: (2.0, 2.0 * math.sqrt(2.0)),
}


@dataclass(frozen=True)
class ConfidentGnMax:
    """Confident-GNMax on teacher vote histograms (see the module docstring for the analysis).

    ``threshold`` is in votes; ``sigma_threshold`` and ``sigma_gnmax`` are noise standard
    deviations in votes. Sensitivities follow from ``relation``: max count 1 and histogram
    sqrt(2) under add/remove, 2 and 2 sqrt(2) under replace-one.
    """

    threshold: float
    sigma_threshold: float
    sigma_gnmax: float
    relation: Relation = Relation.ADD_OR_REMOVE

    def __post_init__(self) -> None:
        if not (self.sigma_threshold > 0 and self.sigma_gnmax > 0):
            raise ValueError("Confident-GNMax needs positive sigma_threshold and sigma_gnmax")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold}")

    @property
    def threshold_mechanism(self) -> GaussianMechanism:
        sensitivity = _SENSITIVITY[Relation(self.relation)][0]
        return GaussianMechanism("threshold check", sensitivity, self.sigma_threshold / sensitivity)

    @property
    def gnmax_mechanism(self) -> GaussianMechanism:
        sensitivity = _SENSITIVITY[Relation(self.relation)][1]
        return GaussianMechanism("GNMax", sensitivity, self.sigma_gnmax / sensitivity)

    @property
    def mu_threshold(self) -> float:
        """GDP parameter of one threshold check."""
        return 1.0 / self.threshold_mechanism.noise_multiplier

    @property
    def mu_gnmax(self) -> float:
        """GDP parameter of one GNMax release."""
        return 1.0 / self.gnmax_mechanism.noise_multiplier

    @property
    def mu_query(self) -> float:
        """GDP parameter of one answered query (check plus release), the worst case."""
        return math.hypot(self.mu_threshold, self.mu_gnmax)

    def passes(self, votes: np.ndarray, rng: np.random.Generator) -> bool:
        """The noisy threshold check on the largest vote count."""
        noisy_max = self.threshold_mechanism.release(float(np.max(votes)), rng)
        return bool(noisy_max >= self.threshold)

    def label(self, votes: np.ndarray, rng: np.random.Generator) -> int:
        """The GNMax release: index of the largest noisy count."""
        noisy = self.gnmax_mechanism.release(np.asarray(votes, dtype=float), rng)
        return int(np.argmax(noisy))


class GdpFilter:
    """A Gaussian DP filter with budget ``budget_mu``: admits mechanisms while
    ``sum mu_i^2 <= budget_mu^2`` (Smith and Thakurta 2022); the interaction is then
    ``budget_mu``-GDP whatever the choices of the analyst. Holds no data, only parameters."""

    def __init__(self, budget_mu: float) -> None:
        if not (budget_mu >= 0 and math.isfinite(budget_mu)):
            raise ValueError(f"budget_mu must be finite and >= 0, got {budget_mu}")
        self.budget_mu = budget_mu
        self.spent_sq = 0.0

    @property
    def spent_mu(self) -> float:
        return math.sqrt(self.spent_sq)

    def affords(self, *mus: float) -> bool:
        """Whether running mechanisms with these GDP parameters keeps within the budget."""
        total = self.spent_sq + math.fsum(m * m for m in mus)
        return total <= self.budget_mu**2 * (1 + 1e-12)

    def spend(self, mu: float) -> None:
        """Record one mechanism run; refuses one the budget cannot afford."""
        if not self.affords(mu):
            raise ValueError(
                f"the filter cannot afford mu={mu:.4g}: spent {self.spent_mu:.4g} of "
                f"{self.budget_mu:.4g}"
            )
        self.spent_sq += mu * mu


@dataclass(frozen=True)
class PatePrivacy:
    """The privacy side of a PromptPATE job, fixed before it reads a record: the aggregator
    (noise and threshold) and the filter budget ``budget_mu`` the ledger charges."""

    aggregator: ConfidentGnMax
    budget_mu: float
    accounting: Accounting

    def event(self) -> PateEvent:
        """What the ledger charges: ``budget_mu``-GDP under the aggregator's relation."""
        return PateEvent(1.0 / self.budget_mu, Relation(self.aggregator.relation).value)

    def epsilon(self, delta: float) -> float:
        return accountant_for(self.accounting).epsilon(self.event(), delta)


def mu_for_epsilon(epsilon: float, delta: float, accounting: Accounting) -> float:
    """The largest GDP parameter ``mu`` whose event costs at most ``epsilon`` at ``delta``
    under the accountant of ``accounting``: the least noise 1/mu
    (:func:`app.privacy.noise_search.smallest_noise`, within 1e-6 of the target; the safe
    end). A noise of 1e-3 (mu 1000) is the least offered."""
    if not is_epsilon(epsilon):
        raise CalibrationError(f"target epsilon must be a positive number, got {epsilon}")
    accountant = accountant_for(accounting)
    relation = accountant.relation.value

    def cost(noise: float) -> float:
        return accountant.epsilon(PateEvent(noise, relation), delta)

    def refusal(_noise: float, _epsilon: float) -> str:
        return f"target epsilon {epsilon:g} at delta {delta:g} is too small for any PromptPATE job"

    found = smallest_noise(
        cost, epsilon, low=1e-3, high=1e4, rel_tol=1e-6, max_iter=200, refusal=refusal
    )
    return 1.0 / found.noise


def plan_pate_privacy(
    *,
    epsilon: float,
    delta: float,
    accounting: Accounting,
    threshold: float,
    queries: int,
    n_public: int,
    sigma_ratio: float = 2.0,
    sigma_threshold: float | None = None,
    sigma_gnmax: float | None = None,
) -> PatePrivacy:
    """Noise and filter budget of a PromptPATE job meeting (``epsilon``, ``delta``).

    The filter budget ``mu`` is calibrated to the target under the accountant. Without explicit
    sigmas, the noise is sized so that ``min(queries, n_public)`` answered queries (check plus
    release each) exhaust ``mu``, with ``sigma_threshold = sigma_ratio * sigma_gnmax``;
    rejected queries cost only their check, so the filter usually lets the job go further. The
    job is charged ``min(mu, sqrt(n_public) * mu_query)``: no more than every public input
    answered could cost, and never more than the target.
    """
    if queries < 1 or n_public < 1:
        raise CalibrationError(
            f"a PromptPATE job needs at least one query and one public input, got "
            f"queries={queries}, n_public={n_public}"
        )
    if (sigma_threshold is None) != (sigma_gnmax is None):
        raise CalibrationError("give both sigma_threshold and sigma_gnmax, or neither")
    if not sigma_ratio > 0:
        raise CalibrationError(f"sigma_ratio must be > 0, got {sigma_ratio}")
    relation = accountant_for(accounting).relation
    mu = mu_for_epsilon(epsilon, delta, accounting)
    if sigma_threshold is None or sigma_gnmax is None:
        planned = min(queries, n_public)
        d_threshold, d_gnmax = _SENSITIVITY[relation]
        sigma_gnmax = math.sqrt(planned * ((d_threshold / sigma_ratio) ** 2 + d_gnmax**2)) / mu
        sigma_threshold = sigma_ratio * sigma_gnmax
    aggregator = ConfidentGnMax(threshold, sigma_threshold, sigma_gnmax, relation)
    budget = min(mu, math.sqrt(n_public) * aggregator.mu_query)
    return PatePrivacy(aggregator, budget, accounting)
