"""The registered methods, run by the evaluation and the audit the way a job runs them.

A job is ``configure`` (the job's fields and its params), ``plan`` (from the counts the
service gives a job: the label sizes and record counts, released under DP by the plan unless
``JobSpec.public_counts`` declares them public) and ``plan.run``; the
worker does exactly this (:mod:`workers.runner`). ``dpsyn eval`` and ``dpsyn audit`` go through
:func:`run_method` so that what they measure is what the service's jobs release. The one
difference is the seed, which the service never passes: it makes runs repeatable (and voids
the guarantee, which a study does not need).

Nothing here names a method: the registry (:data:`app.methods.registry.METHODS`, read at call
time, so a method registered later is found) says what exists, and each method declares what
the evaluation needs (its ``title``, ``reads_public``, ``zero_epsilon_baseline``, its
``params`` model). How a result is scored is decided from the result: a soft prompt answers
through :class:`~app.promptdpsgd.backend.SoftPromptedBackend`, demonstrations through their
prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.llm.base import LLMBackend
from app.methods import registry
from app.methods.base import Method, MethodPlan, plan_local
from app.privacy.accounting import Accounting
from app.results import SynthesisResult
from app.synthesis.data import Record
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import TaskSpec


def registered_methods() -> dict[str, Method]:
    """Every registered method by name, in registry order (read now, not at import)."""
    return {str(kind): method for kind, method in registry.METHODS.items()}


def get(name: str) -> Method:
    """The method registered as ``name``; ValueError naming the registered ones if none."""
    methods = registered_methods()
    if name not in methods:
        raise ValueError(f"unknown method {name!r}: one of {', '.join(methods)}")
    return methods[name]


def title(name: str) -> str:
    """A method's name for people (its name if it declares none, or is not registered)."""
    method = registered_methods().get(name)
    return (method.title if method is not None else "") or name


def takes(method: Method, name: str) -> bool:
    """Whether ``name`` is one of ``method``'s parameters."""
    return name in method.params.model_fields


def params_for(method: Method, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` that ``method`` takes (one namespace across methods, as
    in the API's ``params`` object: a name means the same thing to every method taking it)."""
    return {name: value for name, value in params.items() if takes(method, name)}


def untaken(names: Iterable[str], methods: Sequence[str]) -> list[str]:
    """The parameter names that none of ``methods`` takes."""
    chosen = [get(name) for name in methods]
    return [name for name in names if not any(takes(m, name) for m in chosen)]


@dataclass(frozen=True)
class JobSpec:
    """A job's own fields (what a job request carries besides the method and its params)."""

    epsilon: float
    shots: int | None
    accounting: Accounting = Accounting.TIGHT
    delta: float | None = None  # None: the method's default (public, app.privacy.unit)
    seed: int | None = None
    # The data owner's declaration that the label counts are public (the service's
    # Dataset.counts_public); False, as a new dataset: the run releases the counts it plans with.
    public_counts: bool = False


@dataclass(frozen=True)
class MethodRun:
    """What a run planned (its public schedule, its epsilon) and what it released."""

    plan: MethodPlan
    result: SynthesisResult


def configure(
    name: str, task: TaskSpec, job: JobSpec, params: Mapping[str, Any]
) -> tuple[Method, Any]:
    """The method and its validated config (:class:`~app.methods.base.ParamsError`, a
    ValueError naming the parameter, if the parameters cannot make one)."""
    method = get(name)
    config = method.configure(
        task,
        epsilon=job.epsilon,
        delta=job.delta,
        shots=job.shots,
        accounting=job.accounting,
        params=params_for(method, params),
        seed=job.seed,
    )
    return method, config


def run_method(
    name: str,
    task: TaskSpec,
    records: Sequence[Record],
    backend: LLMBackend,
    job: JobSpec,
    params: Mapping[str, Any],
    public: Sequence[str] | None = None,
) -> MethodRun:
    """Configure, plan (from counts, as the service does) and run method ``name`` on
    ``records`` (and ``public`` texts if the method reads some)."""
    method, config = configure(name, task, job, params)
    if method.reads_public and not public:
        raise ValueError(f"method {name} needs public inputs (dpsyn eval --public PATH)")
    texts = list(public or ()) if method.reads_public else []
    sizes = partition_sizes(task, records)
    local = plan_local(
        method, task, config, sizes, declared_public=job.public_counts, public=len(texts)
    )
    plan = local.plan
    plan.check_backend(backend)  # as the worker asks, before any record is read
    return MethodRun(plan, local.report(plan.run(list(records), backend, None, texts)))


def scorer(backend: LLMBackend, result: SynthesisResult) -> LLMBackend:
    """The backend that answers with ``result``: ``backend`` itself for demonstrations (they
    are in the prompt), the soft prompt in front of every prompt for a soft prompt."""
    if result.soft_prompt is None:
        return backend
    # Imported here: torch loads only when a run released a soft prompt.
    from app.promptdpsgd.artifact import SoftPrompt
    from app.promptdpsgd.backend import SoftPromptedBackend

    if not isinstance(result.soft_prompt, SoftPrompt):
        raise TypeError(f"cannot score a soft prompt of type {type(result.soft_prompt).__name__}")
    return SoftPromptedBackend(backend, result.soft_prompt)


def released(
    result: SynthesisResult, public_stats: Mapping[str, Any] | None
) -> list[dict[str, object]]:
    """What a run records of its release: each demonstration (a DP release: label and
    generated text), or a soft prompt's hash and shape with the method's public stats (never
    its embeddings)."""
    soft = result.soft_prompt
    if soft is None:
        return [{"label": d.label, "text": d.text} for d in result.demonstrations]
    return [{"soft_prompt_sha256": soft.sha256, "length": soft.length, **(public_stats or {})}]
