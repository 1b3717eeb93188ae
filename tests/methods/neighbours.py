"""What a method's stored job row holds, for the neighbour tests of each method (issue 32)."""

from __future__ import annotations

import copy
from typing import Any

from app.methods.base import MethodPlan
from app.privacy.events import to_dict


def stored_row(plan: MethodPlan) -> dict[str, Any]:
    """The job row a plan writes, less the exact record count it keeps for the worker's
    check of the data (``config.sizes.private``: the job row only, never served)."""
    stored = plan.stored()
    config = copy.deepcopy(dict(stored.config))
    del config["sizes"]["private"]
    return {
        "config": config,
        "schedule": list(stored.schedule),
        "delta": stored.delta,
        "event": to_dict(plan.event()),
        "epsilon": plan.epsilon(),
        "progress_total": plan.progress_total,
    }
