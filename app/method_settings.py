"""What every PromptPATE and PromptDPSGD job's validated settings share.

Both methods' configs (:mod:`app.pate.config`, :mod:`app.promptdpsgd.config`) start with
the same budget (a finite target epsilon, a public delta) and end with the same studies-only
seed. They were declared twice, word for word, so a change to the budget's bounds had to be
made in two places; declared here once, the two methods cannot drift apart. Every field is
public: nothing here is derived from the private data.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from app.documented import Documented
from app.privacy.unit import DEFAULT_DELTA

# A strictly positive, finite number: a noise ratio, a rate, a norm.
PositiveFinite = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
# A share of a whole, both ends included.
Share = Annotated[float, Field(ge=0.0, le=1.0)]


class MethodSettings(Documented):
    """The budget a job's noise is calibrated to, and the seed only tests and studies set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epsilon: PositiveFinite
    """Target epsilon of the whole job (> 0, finite: no method here has a no-noise mode)."""
    delta: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description=f"Target delta; default {DEFAULT_DELTA:g} (public, never 1/|D|).",
    )
    seed: int | None = None
    """Tests and studies only: voids the guarantee."""
