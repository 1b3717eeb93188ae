"""``dpsyn privacy quote``: what a job of any registered method would cost on a public shape.

The other ``dpsyn privacy`` commands price the token loop's own parameters; this one prices a
*job*, of whatever method is registered (a plug-in's too), from what the job would be planned
from: the task's labels, records per label (typed here, so public to whoever types them), the
job's epsilon, delta and accounting, and the method's own options, generated from its
declaration exactly as ``dpsyn synthesize``'s are (:mod:`app.cli.method_options`).

It goes through the code that plans a job on the service,
:func:`app.services.job_plan.plan_job` (the method's ``configure``, then its
``plan(task, config, counts)``), which ``POST /v1/jobs/quote`` and every admission also run
once they have read the dataset's counts and the budget from the database. So the epsilon
printed is the one the ledger would reserve for a job on a dataset of these counts. What it
leaves out is the database half of the API's quote (the dataset, its budget, the spend so far
and after): it needs a server's data, and a shape typed here has none. Nothing is read,
charged or stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from app.cli.custom_task import custom_task
from app.cli.errors import fail, reported_errors
from app.cli.method_options import (
    RegistryCommand,
    given_options,
    method_inputs,
    refuse_other_options,
)
from app.cli.options import LABELS, PaperAccountingOpt, PrintJsonOpt, RegisteredMethodOpt
from app.cli.vocabulary import in_cli_words
from app.methods.registry import (
    DEFAULT_METHOD,
    Counts,
    Method,
    MethodPlan,
    counts_refusal,
    get_method,
    kinds_where,
)
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.display import delta_text, epsilon_text
from app.privacy.event_text import describe_event
from app.privacy.events import (
    DatasetEvent,
    event_parts,
    noise_by_partition,
    noise_multipliers,
    to_dict,
)
from app.privacy.unit import COUNT_RELEASE_SHARE, DEFAULT_DELTA
from app.services.errors import ServiceError
from app.services.job_plan import JobInputs, check_epsilon, plan_job
from app.synthesis.tasks import TaskSpec, get_task

EpsilonOpt = Annotated[
    float, typer.Option("--epsilon", help="The job's target epsilon (> 0, finite).")
]
TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="trec|trec14|agnews|sst2|custom, or a spec file (default: custom when --labels "
        "or --n-labels is given). The task sets the token loop's default M, N and tmax.",
    ),
]
NLabelsOpt = Annotated[
    int | None,
    typer.Option(
        "--n-labels", min=1, help="A custom task of this many labels (label0, label1, ...)."
    ),
]
NLabelOpt = Annotated[
    int, typer.Option("--n-label", min=1, help="Records of each label (its partition).")
]
NTotalOpt = Annotated[
    int | None,
    typer.Option(
        "--n-total", min=1, help="Records in the dataset |D| (default: --n-label x labels)."
    ),
]
NPublicOpt = Annotated[
    int | None,
    typer.Option(
        "--n-public",
        min=1,
        help="Records of the public dataset of unlabelled texts, for a method that reads one.",
    ),
]
DeltaOpt = Annotated[
    float,
    typer.Option("--delta", help=f"The job's delta (default {DEFAULT_DELTA:g}, a budget's)."),
]
PublicCountsOpt = Annotated[
    bool,
    typer.Option(
        "--public-counts/--no-public-counts",
        help="Price a job on a dataset whose owner declared its records per label public: "
        "it plans with the exact counts (needed for --accounting paper). Default: the job "
        "plans with the dataset's one count release, priced here as if it had estimated "
        "--n-label per label (the release itself is charged once per dataset).",
    ),
]


@contextmanager
def _quote_errors() -> Iterator[None]:
    """The usage errors of ``dpsyn synthesize`` (a bad option or task, a plan the method
    refuses), and the service's planning errors in the command line's words."""
    try:
        with reported_errors():
            yield
    except ServiceError as error:
        raise fail(in_cli_words(error.message)) from None


def _quote(
    *,
    method: RegisteredMethodOpt = DEFAULT_METHOD,
    epsilon: EpsilonOpt,
    task: TaskOpt = None,
    labels: Annotated[str | None, LABELS] = None,
    n_labels: NLabelsOpt = None,
    n_label: NLabelOpt,
    n_total: NTotalOpt = None,
    n_public: NPublicOpt = None,
    delta: DeltaOpt = DEFAULT_DELTA,
    accounting: PaperAccountingOpt = Accounting.TIGHT,
    public_counts: PublicCountsOpt = False,
    as_json: PrintJsonOpt = False,
    **method_options: Any,
) -> None:
    """What a job of any registered method would cost on a dataset of the given shape, as
    the service plans it: its epsilon and delta, the privacy event the ledger would reserve
    and its noise. The method's own options are listed under "Method parameters"."""
    with _quote_errors():
        chosen = get_method(method)
        given = given_options(method_options)
        refuse_other_options(chosen, given)
        shots, params = method_inputs(chosen, given)
        spec = _task(task, labels, n_labels)
        counts = _counts(chosen, spec, n_label, n_total, n_public, public_counts)
        _check_counts(accounting, public_counts)
        check_epsilon(epsilon)  # the service's rule and message, as admission checks it
        inputs = JobInputs(chosen, spec, counts, epsilon, delta, accounting, shots, params)
        plan = plan_job(inputs)
    event = plan.event()
    quote = _quote_fields(chosen, plan, event, inputs)
    typer.echo(json.dumps(quote) if as_json else _quote_text(quote, event))


quote_command = RegistryCommand(_quote)


def _task(task: str | None, labels: str | None, n_labels: int | None) -> TaskSpec:
    """The task of ``--task``, or the custom task of ``--labels`` or ``--n-labels``."""
    if labels is not None and n_labels is not None:
        raise ValueError("--labels and --n-labels both give the labels: give one")
    custom = labels is not None or n_labels is not None
    if task not in (None, "custom"):
        if custom:
            raise ValueError(f"--labels/--n-labels: only for a custom task, not --task {task}")
        return get_task(task)
    if not custom:
        raise ValueError(
            "the task: give --task (trec|trec14|agnews|sst2 or a spec file), --labels a,b,... "
            "or --n-labels K"
        )
    names = labels if labels is not None else ",".join(f"label{i}" for i in range(n_labels or 0))
    return custom_task({"labels": names}, None)


def _counts(
    method: Method,
    task: TaskSpec,
    n_label: int,
    n_total: int | None,
    n_public: int | None,
    public_counts: bool,
) -> Counts:
    """The counts a job on this shape is planned from: ``n_label`` records of each of the
    task's labels, ``n_total`` in all, and the public dataset's records for a method that
    reads one (refused for one that does not, as ``dpsyn synthesize`` refuses --public)."""
    if not task.labels:
        raise ValueError(f"--task {task.name}: a quote prices a classification task's labels")
    if method.reads_public and n_public is None:
        raise ValueError(f"--method {method.name} needs --n-public N (its public dataset)")
    if not method.reads_public and n_public is not None:
        readers = "/".join(kinds_where(lambda m: m.reads_public))
        raise ValueError(f"--n-public is only used with --method {readers}")
    least = n_label * len(task.labels)
    if n_total is not None and n_total < least:
        raise ValueError(
            f"--n-total {n_total} is fewer than {len(task.labels)} labels x --n-label {n_label}"
        )
    sizes = dict.fromkeys(task.labels, n_label)
    if public_counts:
        return Counts.declared(sizes, n_public or 0, total=n_total)
    return Counts.assumed(sizes, n_public or 0, total=n_total)


def _check_counts(accounting: Accounting, public_counts: bool) -> None:
    """Paper accounting needs the counts declared public, as on the service (where the
    budget refuses it) and in ``dpsyn synthesize``."""
    if (refusal := counts_refusal(accounting, public_counts)) is not None:
        raise ValueError(f"--accounting {accounting.value}: {refusal}; pass --public-counts")


def _quote_fields(
    method: Method, plan: MethodPlan, event: DatasetEvent, inputs: JobInputs
) -> dict[str, Any]:
    """The quote as JSON: what the API's quote says of the job itself (epsilon, delta), the
    event the ledger would reserve (its stored form), the noise, and the method's config
    as a job row would store it (every option given, and the defaults it chose)."""
    stored = plan.stored()
    return {
        "method": method.name,
        "task": inputs.task.name,
        "epsilon": plan.epsilon(),
        "delta": plan.delta,
        "target_epsilon": inputs.epsilon,
        "accounting": inputs.accounting.value,
        "counts_public": inputs.counts.declared_public,
        "noise_multipliers": list(noise_multipliers(event)),
        # each label's own, where the job's noise is calibrated per label (the token loop)
        "noise_by_label": {k: list(v) for k, v in noise_by_partition(event).items()},
        # charged once per dataset, beside its jobs, when they plan with released counts
        "count_release_share": None
        if inputs.counts.declared_public or not method.reads_counts
        else COUNT_RELEASE_SHARE,
        "event": to_dict(event),
        "settings": method.settings(stored),
        "config": dict(stored.config),
    }


def _quote_text(quote: dict[str, Any], event: DatasetEvent) -> str:
    """The quote for people: the method's settings line, the price, each part of the event
    on a line of its own (one per label for the token loop), and the noise."""
    accounting = Accounting(quote["accounting"])
    relation = accountant_for(accounting).relation.value
    counts = "declared public" if quote["counts_public"] else "not declared public"
    lines = [quote["settings"]] if quote["settings"] else []
    lines.append(
        f"{quote['method']}: epsilon = {epsilon_text(quote['epsilon'])} at delta = "
        f"{delta_text(quote['delta'])} (target {epsilon_text(quote['target_epsilon'])}; "
        f"{accounting.value} accounting, {relation} "
        f"neighbours; the dataset's counts {counts})"
    )
    lines.append("event (what the ledger would reserve; docs/privacy.md, 'Privacy events'):")
    lines += [f"  {describe_event(part)}" for part in event_parts(event)]
    noise = ", ".join(f"{value:.4g}" for value in quote["noise_multipliers"]) or "none"
    lines.append(f"noise multipliers: {noise}")
    for label, values in quote["noise_by_label"].items():
        lines.append(f"  {label}: {', '.join(f'{v:.4g}' for v in values)}")
    if quote["count_release_share"] is not None:
        lines.append(
            "plus, once per dataset, the release of its label counts that every plan reads: "
            f"{quote['count_release_share']:.0%} of the budget's epsilon and delta by default "
            "(DPSYN_COUNT_RELEASE_SHARE; docs/privacy.md, 'The count release')"
        )
    return "\n".join(lines)
