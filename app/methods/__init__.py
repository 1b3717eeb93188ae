"""Synthesis methods behind one interface, and the registry that names them.

Each method (the token loop with its Tang and AdaDPSyn aggregators, PromptPATE, PromptDPSGD)
is one object that owns its request parameters (declared once, :mod:`app.methods.params`),
its config, its plan (the privacy event that admission reserves), how that plan is rebuilt
from a stored job, how it runs, its progress unit and which of its stats are public. The API,
the services, the workers, the CLI, the dashboard and the docs table (:mod:`app.methods.docs`)
ask :mod:`app.methods.registry` instead of branching on the method's name, so a new method is
one module and one :func:`~app.methods.registry.register` call, from here or from outside
``app`` (a test registers its own). A method module imports what it uses from this package
alone (``from app.methods import Method, declare, register, ...``, the names below).

This package is algorithms only: it imports ``app.synthesis``, ``app.pate`` and
``app.privacy``, never the web or database layers. Importing it is cheap: the method modules
load only through :mod:`app.methods.registry`, and the names below on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# What a method module uses, by name -> the module that defines it. A method (built-in or a
# plug-in, docs/service.md "Adding a method") imports all of it from here: ``from app.methods
# import Method, declare, register, ...``. The names load on first use (PEP 562), so importing
# ``app.methods.kinds`` (the thin client's tests do) stays cheap and loads no method.
_EXPORTS = {
    # the interface and what a method is given (app.methods.base, .params, .registry)
    "Counts": "app.methods.base",
    "CountsMode": "app.methods.base",
    "DeclaredCounts": "app.methods.base",
    "LocalPlan": "app.methods.base",
    "plan_local": "app.methods.base",
    # the counts a plan reads: the dataset's one release (app.privacy.unit), and its helpers
    "CountRelease": "app.privacy.unit",
    "COUNT_RELEASE_SHARE": "app.privacy.unit",
    "DEFAULT_DELTA": "app.privacy.unit",
    "count_noise_multiplier": "app.privacy.unit",
    "local_release": "app.privacy.unit",
    "posterior_mean": "app.privacy.unit",
    "release_counts": "app.privacy.unit",
    "JobConfig": "app.methods.base",
    "Method": "app.methods.base",
    "MethodPlan": "app.methods.base",
    "ParamsError": "app.methods.base",
    "Stored": "app.methods.base",
    "Param": "app.methods.params",
    "declare": "app.methods.params",
    "register": "app.methods.registry",
    "registered": "app.methods.registry",
    "unregister": "app.methods.registry",
    # the job's world: its task, records, model, accounting, events and result
    "TaskSpec": "app.synthesis.tasks",
    "Record": "app.synthesis.data",
    "LLMBackend": "app.llm.base",
    "Accounting": "app.privacy.accounting",
    "accountant_for": "app.privacy.accounting",
    # the one noise search: the least noise whose event meets a target epsilon
    "smallest_noise": "app.privacy.noise_search",
    "CalibrationError": "app.privacy.noise_search",
    "DatasetEvent": "app.privacy.events",
    "DpsgdEvent": "app.privacy.events",
    "GaussianEvent": "app.privacy.events",
    "LaplaceEvent": "app.privacy.events",
    "PureDpEvent": "app.privacy.events",
    "RandomizedResponseEvent": "app.privacy.events",
    "SampledEvent": "app.privacy.events",
    "ComposedEvent": "app.privacy.events",
    "Sensitivity": "app.privacy.events",
    "PateEvent": "app.privacy.events",
    "SynthesisEvent": "app.privacy.events",
    "to_dict": "app.privacy.events",
    "Demonstration": "app.results",
    "Progress": "app.results",
    "SynthesisResult": "app.results",
    "demonstration_prompt": "app.synthesis.prompts",
    "public_prompt": "app.synthesis.prompts",
    # privacy noise: the job's generator, and the mechanism functions that draw from it and
    # record each release (the method contract holds the record to the plan's event)
    "make_rng": "app.privacy.rng",
    "gaussian_release": "app.privacy.releases",
    "laplace_release": "app.privacy.releases",
    "report_noisy_max": "app.privacy.releases",
    "randomized_response": "app.privacy.releases",
}
__all__ = [
    "COUNT_RELEASE_SHARE",
    "DEFAULT_DELTA",
    "Accounting",
    "CalibrationError",
    "ComposedEvent",
    "CountRelease",
    "Counts",
    "CountsMode",
    "DatasetEvent",
    "DeclaredCounts",
    "Demonstration",
    "DpsgdEvent",
    "GaussianEvent",
    "JobConfig",
    "LLMBackend",
    "LaplaceEvent",
    "LocalPlan",
    "Method",
    "MethodPlan",
    "Param",
    "ParamsError",
    "PateEvent",
    "Progress",
    "PureDpEvent",
    "RandomizedResponseEvent",
    "Record",
    "SampledEvent",
    "Sensitivity",
    "Stored",
    "SynthesisEvent",
    "SynthesisResult",
    "TaskSpec",
    "accountant_for",
    "count_noise_multiplier",
    "declare",
    "demonstration_prompt",
    "gaussian_release",
    "laplace_release",
    "local_release",
    "make_rng",
    "plan_local",
    "posterior_mean",
    "public_prompt",
    "randomized_response",
    "register",
    "registered",
    "release_counts",
    "report_noisy_max",
    "smallest_noise",
    "to_dict",
    "unregister",
]

if TYPE_CHECKING:  # the same names, for type checkers (at run time: __getattr__)
    from app.llm.base import LLMBackend
    from app.privacy.accounting import Accounting, accountant_for
    from app.privacy.events import (
        ComposedEvent,
        DatasetEvent,
        DpsgdEvent,
        GaussianEvent,
        LaplaceEvent,
        PateEvent,
        PureDpEvent,
        RandomizedResponseEvent,
        SampledEvent,
        Sensitivity,
        SynthesisEvent,
        to_dict,
    )
    from app.privacy.noise_search import CalibrationError, smallest_noise
    from app.privacy.releases import (
        gaussian_release,
        laplace_release,
        randomized_response,
        report_noisy_max,
    )
    from app.privacy.rng import make_rng
    from app.privacy.unit import (
        COUNT_RELEASE_SHARE,
        DEFAULT_DELTA,
        CountRelease,
        count_noise_multiplier,
        local_release,
        posterior_mean,
        release_counts,
    )
    from app.results import Demonstration, Progress, SynthesisResult
    from app.synthesis.data import Record
    from app.synthesis.prompts import demonstration_prompt, public_prompt
    from app.synthesis.tasks import TaskSpec

    from .base import (
        Counts,
        CountsMode,
        DeclaredCounts,
        JobConfig,
        LocalPlan,
        Method,
        MethodPlan,
        ParamsError,
        Stored,
        plan_local,
    )
    from .params import Param, declare
    from .registry import register, registered, unregister


def __getattr__(name: str) -> Any:
    """A name of :data:`_EXPORTS`, imported from its module when first asked for."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'app.methods' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
