"""What a method's stored job row holds, for the neighbour tests of each method (issues 32
and 41)."""

from __future__ import annotations

import copy
from typing import Any

from app.methods.base import MethodPlan
from app.privacy.events import to_dict


def stored_row(plan: MethodPlan) -> dict[str, Any]:
    """The job row a plan writes, whole: since issue 41 it keeps no exact record count (the
    worker checks the dataset against its own row), so nothing is left out."""
    stored = plan.stored()
    return {
        "config": copy.deepcopy(dict(stored.config)),
        "schedule": list(stored.schedule),
        "delta": stored.delta,
        "event": to_dict(plan.event()),
        "epsilon": plan.epsilon(),
        "progress_total": plan.progress_total,
    }
