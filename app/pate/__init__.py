"""PromptPATE (Duan et al. 2023, "Flocks of stochastic parrots"): private teacher prompts label
public inputs through Confident-GNMax, and the best prompt of labelled public examples is the
result. The privacy analysis is in :mod:`app.privacy.pate`; see docs/synthesis.md.

Modules: :mod:`~app.pate.config` (settings), :mod:`~app.pate.plan` (planning from sizes),
:mod:`~app.pate.teachers` (keyed-hash partition and votes), :mod:`~app.pate.run` (the job),
:mod:`~app.pate.student` (student selection), :mod:`~app.pate.public` (public input files).
"""

from app.pate.config import PateConfig, PateError
from app.pate.plan import PatePlan, plan_pate
from app.pate.public import read_public
from app.pate.run import run_pate

__all__ = ["PateConfig", "PateError", "PatePlan", "plan_pate", "read_public", "run_pate"]
