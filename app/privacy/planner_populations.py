"""The synthetic teachers the AdaDPSyn planner (:mod:`app.privacy.planner`) plans on.

Every population is a function ``make(M, K, S, rng) -> S x M x K``: S token steps, each with
M teachers' next-token distributions over K candidate tokens. They are public (fixed
seeds, no record), and they are chosen for what can go wrong with the planner's one lever,
a clip of every teacher towards the uniform distribution: it lowers the noise of the mean
(a smaller sensitivity) and biases the mean towards the teachers that are least sure, which
turns the clean argmax wherever a more confident group and a less confident one prefer
different tokens by a small margin.

* :data:`REGIMES` -- seven base regimes, from teachers that agree to a diffuse step; the
  objective (the planner's average gain) reads them.
* :data:`FAMILY` -- the disagreeing mixture: a share of the teachers confident (0.7 to 0.95)
  in one token, the others unsure, leaning to another token over a flat spread.
* :data:`MIXED` -- mixed confidence: a share of the teachers very sure (0.85 to 0.99) of one
  token, the others fairly sure (``low`` to ``low`` + 0.25) of another. Language models are
  often this sure of a next token; a clip of 0.8, which leaves the fairly sure teachers
  alone and pulls the very sure ones in, turns the argmax of the close calls here.

The veto reads every member of the two families on its own: a candidate that loses on one
is not planned, whatever it gains on average.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Regime = Callable[[int, int, int, np.random.Generator], np.ndarray]


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
    confident in a token of its own: Tang's mean is already right most of the time here."""
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


def _groups(rng: np.random.Generator, S: int, M: int, share: float) -> np.ndarray:
    """S x M: True for ``share`` of each step's teachers (at least one), placed at random."""
    count = max(1, round(share * M))
    return rng.permuted(np.tile(np.arange(M) < count, (S, 1)), axis=1)


def mixture(share: float, lean: float) -> Regime:
    """The disagreeing-mixture regime: a ``share`` of the teachers confident (0.7 to 0.95)
    in one token, the others unsure, each giving ``lean`` (plus a flat spread of the rest)
    to another token. Clipping towards uniform shrinks the confident teachers and leaves
    the unsure ones alone, so in the middle of this family the clipped mean's argmax is the
    unsure majority's token where the plain mean's is the confident minority's."""

    def make(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
        confident = _groups(rng, S, M, share)
        first, second = _two_tokens(rng, S, K)
        top = rng.uniform(0.7, 0.95, size=(S, M, 1))
        sure = _with_mass(rng.dirichlet(np.full(K, 0.5), size=(S, M)), first, top)
        unsure = _with_mass(rng.dirichlet(np.ones(K), size=(S, M)), second, lean)
        return _around(rng, np.where(confident[..., None], sure, unsure), 60.0)

    return make


def mixed_confidence(share: float, low: float) -> Regime:
    """The mixed-confidence regime: a ``share`` of the teachers very sure (0.85 to 0.99) of
    one token, the others fairly sure (``low`` to ``low + 0.25``) of another, the rest of
    each distribution spread unevenly. A clip radius between the two groups' distances from
    uniform pulls in only the very sure teachers, so where their token leads by a small
    margin the clipped mean's argmax is the other group's."""

    def make(M: int, K: int, S: int, rng: np.random.Generator) -> np.ndarray:
        very_sure = _groups(rng, S, M, share)
        first, second = _two_tokens(rng, S, K)
        high = rng.uniform(0.85, 0.99, size=(S, M, 1))
        fair = rng.uniform(low, low + 0.25, size=(S, M, 1))
        sure = _with_mass(rng.dirichlet(np.full(K, 0.5), size=(S, M)), first, high)
        other = _with_mass(rng.dirichlet(np.full(K, 0.5), size=(S, M)), second, fair)
        return _around(rng, np.where(very_sure[..., None], sure, other), 60.0)

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


# The disagreeing mixture's grid: confident shares 10% to 60%, the unsure teachers' lean
# from barely there (0.05 over a flat spread) to strong (0.5).
FAMILY_SHARES = (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6)
FAMILY_LEANS = (0.05, 0.15, 0.25, 0.35, 0.5)
FAMILY: dict[str, Regime] = {
    f"mixture_{share:g}_{lean:g}": mixture(share, lean)
    for share in FAMILY_SHARES
    for lean in FAMILY_LEANS
}

# Mixed confidence's grid: very sure shares 20% to 60%, the others' confidence from 0.4-0.65
# to 0.7-0.95 (where the two groups overlap).
MIXED_SHARES = (0.2, 0.3, 0.4, 0.5, 0.6)
MIXED_LOWS = (0.4, 0.55, 0.7)
MIXED: dict[str, Regime] = {
    f"mixed_{share:g}_{low:g}": mixed_confidence(share, low)
    for share in MIXED_SHARES
    for low in MIXED_LOWS
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
