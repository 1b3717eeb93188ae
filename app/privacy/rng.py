"""Where the privacy noise comes from.

Production code never passes a seed: the generator is seeded with 256 bits from the operating
system's CSPRNG (``secrets``), so noise cannot be predicted or replayed. Tests pass a seed to
make runs reproducible. A generator is created once per job and threaded through every token
step; nothing re-seeds it inside the token loop (re-seeding per token would repeat the same
noise at every step and void the composition analysis).
"""

from __future__ import annotations

import secrets

import numpy as np


def make_rng(seed: int | None = None) -> np.random.Generator:
    """Return a noise generator: OS-entropy seeded unless ``seed`` is given (tests only)."""
    if seed is None:
        seed = secrets.randbits(256)
    return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))
