"""Planning a job from its public inputs: the half of admission that reads no database.

Admission (:func:`app.services.jobs.plan_submission`, behind ``POST /v1/jobs``, its quote
``POST /v1/jobs/quote`` and the dashboard's) first reads what it needs from the database: the
dataset's task and label counts, whether its owner declared those public, the budget's
accounting and delta. From then on a job is a function of those values alone: the method's
config from the job's fields and the client's ``params``, then the method's plan (label
schedule, noise calibrated to the target epsilon, the event the ledger reserves). That second
half is :func:`plan_job`.

Why a module of its own: ``dpsyn privacy quote`` prices a job on a public shape (label counts
typed on the command line) through this same function, with no database or server, so a
quote on the command line and an admission cannot drift apart. It imports no SQLAlchemy, so
the command line loads it without the database layer. Errors are the service's
(:class:`~app.services.errors.InvalidError` with the API's codes and field names); a caller
outside the API words them its own way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.methods.base import client_overrides
from app.methods.registry import Counts, Method, MethodPlan, ParamsError, configure
from app.privacy.accounting import Accounting
from app.privacy.budget import EPSILON_RULE, is_epsilon
from app.privacy.calibration_cache import CalibrationStore, calibration_store
from app.privacy.planner_cache import PlannerStore, planner_store
from app.synthesis.tasks import TaskSpec

from .errors import InvalidError


@dataclass(frozen=True)
class JobInputs:
    """Everything a job is planned from, all of it public or the data owner's declaration:
    the method, the dataset's task and counts (``counts.declared_public``: the owner's
    opt-in), the job's target epsilon, its delta and accounting (a job's are the budget's
    unless it asks for a smaller delta), its shots (None: the method's default for the task)
    and the client's ``params`` (None or missing keys: the method's defaults)."""

    method: Method
    task: TaskSpec
    counts: Counts
    epsilon: float
    delta: float
    accounting: Accounting
    shots: int | None = None
    params: Mapping[str, Any] | None = None


def check_epsilon(epsilon: float) -> None:
    """422 for an epsilon no job can be planned for (positive and finite only: the service
    runs no noiseless baseline)."""
    if not is_epsilon(epsilon):
        raise InvalidError(f"epsilon: {EPSILON_RULE}, got {epsilon}")


def client_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters a client set (None means unset); a seed is refused (422): it makes the
    noise predictable, so it never comes from a client."""
    overrides = client_overrides(params)
    if "seed" in overrides:
        raise InvalidError("params.seed: not accepted by the service")
    return overrides


def job_config(inputs: JobInputs) -> Any:
    """The method's validated config for ``inputs`` (their counts are not read): 422 naming
    the parameter if it cannot be built. Admission asks before it reads any count, so that a
    request that cannot run never causes a count release."""
    try:
        return configure(
            inputs.method,
            inputs.task,
            epsilon=inputs.epsilon,
            delta=inputs.delta,
            shots=inputs.shots,
            accounting=inputs.accounting,
            params=client_params(inputs.params),
        )
    except ParamsError as err:
        raise InvalidError(str(err)) from None


def plan_job(
    inputs: JobInputs,
    store: CalibrationStore | None = None,
    planner: PlannerStore | None = None,
) -> MethodPlan:
    """The method's config and plan for ``inputs``, as admission makes them (nothing is
    stored). 422 naming the parameter if the config cannot be built, 422 ``cannot_plan``
    with the method's reason if the job cannot run on these counts. ``store`` and
    ``planner``: shared caches of calibrations and of AdaDPSyn's planner choices (the
    service's database) besides the process's own; the answer is the same without them,
    only slower."""
    method, task = inputs.method, inputs.task
    config = job_config(inputs)
    try:
        with calibration_store(store), planner_store(planner):
            return method.plan(task, config, inputs.counts)
    except ValueError as err:  # CalibrationError, SynthesisError, PateError, TaskError, sampling
        raise InvalidError(str(err), code="cannot_plan") from None
