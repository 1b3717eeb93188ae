"""The charges of today's events, recorded before issue 35's primitive events (item 3).

``python -m tests.privacy.golden_charges`` writes ``data/golden_charges.json``: for each
representative job (every kind, several parameters, both accountings) and some ledgers of
several jobs, the JSON its event is stored as (``app.privacy.events.to_dict``) and the
epsilon each accountant charged for it at two deltas. It was run once, on the code before
the refactor (commit 9e42447); ``test_golden_charges.py`` reads the stored JSON with the
current code and asserts the same epsilons, so no charge and no stored row changed meaning.
Re-running it on later code proves nothing: keep the file as recorded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from app.privacy.accounting import Accounting, UnsupportedEventError, accountant_for
from app.privacy.dpsgd import dpsgd_event
from app.privacy.events import LabelEvent, PateEvent, SampledEvent, SynthesisEvent, to_dict
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant, TangParams
from app.privacy.synthesis import SynthesisPrivacy

PATH = Path(__file__).parent / "data" / "golden_charges.json"
DELTAS = (1e-5, 1e-6)
SIZES = {"a": 400, "b": 300, "c": 120}


def _synthesis(params: Any, accounting: Accounting, count_sigma: float | None, shots: dict):
    plan = SynthesisPrivacy(
        params=params, accounting=accounting, M=10, N=2, tmax=5, count_sigma=count_sigma
    )
    return plan.synthesis_event(SIZES, shots)


def jobs() -> dict[str, Any]:
    """Named events of every kind, under the accounting each is sampled for."""
    out: dict[str, Any] = {}
    tang = [TangParams(sigma=s) for s in (0.8, 2.0, 6.0)]
    ada = [
        AdaDPSynParams(sigma1=4.0),
        AdaDPSynParams(sigma1=9.0, T=1, sigma0=10.0, sigma2=3.0),
        AdaDPSynParams(sigma1=5.0, variant=AdaDPSynVariant.POOLED, good_radius=False),
    ]
    shots = [{"a": 1, "b": 1}, {"a": 2, "b": 1, "c": 3}]
    for accounting in Accounting:
        for i, params in enumerate(tang + ada):
            for j, count_sigma in enumerate((None, 12.0)):
                if accounting is Accounting.PAPER and count_sigma is not None:
                    continue  # fixed-size sampling needs public counts
                event = _synthesis(params, accounting, count_sigma, shots[(i + j) % 2])
                out[f"synthesis-{accounting.value}-{i}-{j}"] = event
        for count_sigma in (None, 20.0):
            for sigma, steps in ((0.9, 30), (1.6, 200)):
                event = dpsgd_event(
                    sigma, accounting, n=500, batch_size=16, steps=steps, count_sigma=count_sigma
                )
                out[f"dpsgd-{accounting.value}-{sigma}-{steps}-{count_sigma}"] = event
    for relation in ("add_or_remove", "replace_one"):
        for sigma in (0.7, 2.0, 9.0):
            out[f"pate-{relation}-{sigma}"] = PateEvent(sigma, relation)
    idle = SynthesisPrivacy(params=TangParams(sigma=1.0), M=10, N=2, tmax=5)
    label = LabelEvent("a", SampledEvent(idle.sampling(400), idle.params.round_events(), 0))
    out["synthesis-tight-no-steps"] = SynthesisEvent((label,))
    out["synthesis-tight-noiseless"] = _synthesis(
        TangParams(sigma=0.0), Accounting.TIGHT, None, {"a": 1}
    )
    return out


def ledgers(named: dict[str, Any]) -> dict[str, list[str]]:
    """Several jobs on one dataset, in ledger order (names from :func:`jobs`)."""
    return {
        "tight-mixed": [
            "synthesis-tight-0-0",
            "pate-add_or_remove-2.0",
            "dpsgd-tight-1.6-200-20.0",
            "synthesis-tight-3-1",
            "synthesis-tight-5-0",
        ],
        "tight-repeated": ["synthesis-tight-1-1"] * 6 + ["pate-add_or_remove-9.0"] * 2,
        "paper-mixed": [
            "synthesis-paper-0-0",
            "pate-replace_one-2.0",
            "dpsgd-paper-0.9-30-None",
            "synthesis-paper-4-0",
        ],
        "paper-pairs": ["synthesis-paper-1-0", "synthesis-paper-3-0", "pate-replace_one-9.0"],
    }


def _price(accounting: Accounting, events: list[Any]) -> dict[str, Any]:
    accountant = accountant_for(accounting)
    try:
        values = [accountant.dataset_epsilon(events, delta) for delta in DELTAS]
    except UnsupportedEventError:
        return {"refused": True}
    return {"epsilon": [v if math.isfinite(v) else "inf" for v in values]}


def _groups(accounting: Accounting, events: list[Any]) -> list[list[Any]] | None:
    """The dashboard's per-group spends (``app.services.budgets.label_groups``) at the first
    delta, with the dataset's labels listed (one unread): labels, epsilon, jobs, binding."""
    from app.services.budgets import label_groups

    try:
        groups = label_groups(accounting, DELTAS[0], events, [*SIZES, "unread"])
    except UnsupportedEventError:
        return None
    return [[list(g.labels), g.epsilon, g.jobs, g.binding] for g in groups]


def record() -> dict[str, Any]:
    named = jobs()
    return {
        "deltas": list(DELTAS),
        "jobs": {
            name: {
                "event": to_dict(event),
                **{a.value: _price(a, [event]) for a in Accounting},
            }
            for name, event in named.items()
        },
        "ledgers": {
            name: {
                "jobs": names,
                **{a.value: _price(a, [named[n] for n in names]) for a in Accounting},
                "groups": {a.value: _groups(a, [named[n] for n in names]) for a in Accounting},
            }
            for name, names in ledgers(named).items()
        },
    }


if __name__ == "__main__":
    PATH.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
