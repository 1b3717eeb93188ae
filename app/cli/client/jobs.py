"""``dpsyn jobs ...``: submit, quote, show, wait, cancel, list."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.client.budget import RULES, SUM_BELOW, print_label_groups, share_text
from app.cli.client.common import JobIdArg, LimitOpt, OffsetOpt, _page
from app.cli.client.prompts import _dataset_cell, validation_line
from app.cli.custom_task import (
    shots_coverage,
)
from app.cli.http_client import (
    Api,
    ClientError,
    Reply,
    err,
    exit_with,
    one_line,
    out,
    print_rows,
)
from app.cli.options import GroupedTyper
from app.cli.progress import progress_reporter
from app.cli.timestamps import shown_time
from app.db.models import TERMINAL_STATUSES, JobStatus
from app.privacy.accounting import Accounting
from app.privacy.budget import (
    budget_percent,
    is_epsilon,
    spend_text,
)
from app.privacy.display import delta_text
from app.synthesis.config import COVER_EVERY_LABEL_UP_TO, DEFAULT_SHOTS

# --- jobs -----------------------------------------------------------------------------------

jobs_app = GroupedTyper(help="Synthesis jobs.", no_args_is_help=True)


# Final states without a prompt: whether the job still costs epsilon is not obvious there.
_ENDED_WITHOUT_PROMPT = ("cancelled", "failed")


def _describe_job(job: dict[str, Any]) -> str:
    """One line: status, method, cost, datasets, progress in the method's unit (a succeeded
    job's is complete, with the server's note when its run stopped early), what the
    server says about the finished job and, for a cancelled or failed one (or one being
    cancelled), what it is charged and why (all from the job's JSON: the client knows no
    method)."""
    progress = job["progress"]
    public = job.get("public_dataset_id")
    shots = f", {job['shots']} shots" if job["shots"] else ""  # a method may have none
    text = (
        f"job {job['id']} {job['status']}: {job['method']}{shots}, epsilon "
        f"{spend_text(job['epsilon'])}{_asked(job)} at delta {delta_text(job['delta'])}, dataset "
        f"{job['dataset_id']}"
        + (f", public dataset {public}" if public else "")
        + (
            f", validation set {job['validation_dataset_id']}"
            if job.get("validation_dataset_id")
            else ""
        )
        + f", progress {progress['done']}/{progress['total']} {progress.get('unit', '')}".rstrip()
    )
    if job.get("progress_note"):  # a complete run that stopped before its planned total
        text += f" ({one_line(job['progress_note'])})"
    if job.get("summary"):
        text += f", {job['summary']}"
    if job.get("prompt_id"):
        text += f"; prompt {job['prompt_id']}"
    if job.get("error"):
        text += f"; error: {one_line(job['error'])}"
    if job.get("charge_note") and (
        job["status"] in _ENDED_WITHOUT_PROMPT or job.get("cancel_requested")
    ):
        charged = float(job.get("charged_epsilon") or 0.0)  # said beside charge_note
        ended = job["status"] in _ENDED_WITHOUT_PROMPT
        cost = f"charged epsilon {spend_text(charged)}: " if ended else ""
        text += f"; {cost}{one_line(job['charge_note'])}"
    return text


def _wait(
    api: Api, job: dict[str, Any], *, interval: float, timeout: float | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Poll the job until it finishes, with progress on stderr (plain lines off a terminal);
    then, if it succeeded and named a validation set, until its prompt is scored (the worker
    scores after storing the prompt), within the same ``timeout``: what ``--wait`` is for is
    the result, and the score is part of it. The job, and its prompt's validation (None if
    it named no validation set)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    job = _wait_for_job(api, job, interval=interval, deadline=deadline, timeout=timeout)
    if job["status"] == "succeeded" and job.get("validation_dataset_id") and job.get("prompt_id"):
        return job, _wait_for_score(api, job, interval, deadline)
    return job, None


def _wait_for_score(
    api: Api, job: dict[str, Any], interval: float, deadline: float | None
) -> dict[str, Any] | None:
    """The prompt's validation once it is no longer pending, or as it is at the deadline."""
    while True:
        validation = api.call("GET", f"/v1/prompts/{job['prompt_id']}").get("validation")
        if not validation or validation["status"] != "pending":
            return validation
        if deadline is not None and time.monotonic() > deadline:
            return validation
        time.sleep(interval)


def _wait_for_job(
    api: Api, job: dict[str, Any], *, interval: float, deadline: float | None, timeout: float | None
) -> dict:
    """Poll the job until it finishes (a :class:`ClientError` past the deadline)."""
    unit = job["progress"].get("unit", "")
    with progress_reporter(err, f"job {job['id']}", unit) as report:
        report(job["progress"]["done"], job["progress"]["total"] or None, job["status"])
        while job["status"] not in TERMINAL_STATUSES:
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(
                    f"job {job['id']} is still {job['status']} after {timeout:g} s "
                    f"(check with 'dpsyn jobs show {job['id']}')"
                )
            time.sleep(interval)
            job = api.call("GET", f"/v1/jobs/{job['id']}")
            report(job["progress"]["done"], job["progress"]["total"] or None, job["status"])
    return job


def _param_value(text: str) -> Any:
    """A parameter's value: a JSON number, boolean or null, else the string itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) or value is None else text


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ClientError(f"--param {item!r}: expected KEY=VALUE (e.g. teachers=50)", code=2)
        params[name.strip()] = _param_value(value.strip())
    return params


PARAM_FLAGS = (
    "method parameters go as --NAME VALUE (e.g. --M 4, --max-public 40) or --param NAME=VALUE"
)


def _flag_params(args: list[str]) -> dict[str, Any]:
    """The method parameters given as options of their own (``--M 4``, ``--max-public=40``:
    the server's method decides which it takes, so the client needs no list of them); the
    flag's ``-`` stands for ``_``."""
    params: dict[str, Any] = {}
    rest = list(args)
    while rest:
        flag = rest.pop(0)
        name, sep, value = flag.removeprefix("--").partition("=")
        if not flag.startswith("--") or not name:
            raise ClientError(f"unexpected argument {flag[:40]!r}; {PARAM_FLAGS}", code=2)
        if not sep:
            if not rest or rest[0].startswith("--"):
                raise ClientError(f"{flag[:40]}: a value is missing; {PARAM_FLAGS}", code=2)
            value = rest.pop(0)
        params[name.replace("-", "_")] = _param_value(value.strip())
    return params


def _show_submitted(
    job: dict[str, Any],
    validation: dict[str, Any] | None,
    *,
    wait: bool,
    quiet: bool,
    server: Reply,
) -> None:
    """What ``jobs submit`` prints once the job is submitted (and waited for, with its
    prompt's ``validation`` when the job named a validation set; ``--json`` prints the job
    as the API answers it, and ``prompts get --json`` has the score)."""
    if quiet and not server.as_json:
        typer.echo(job["prompt_id"] if wait and job.get("prompt_id") else job["id"])
    elif wait or server.as_json:
        server.show(job, partial(_print_waited, validation))
    if wait and job["status"] != "succeeded":
        if quiet or server.as_json:
            err.print(f"error: {_describe_job(job)}", markup=False)
        raise typer.Exit(code=1)


def _print_waited(validation: dict[str, Any] | None, job: dict[str, Any]) -> None:
    """A job waited for, its prompt's validation score, and how to see the prompt."""
    out.print(_describe_job(job), markup=False)
    if validation:
        out.print(validation_line(validation), markup=False)
    if job.get("prompt_id"):
        out.print(f"see it with: dpsyn prompts get {job['prompt_id']}", markup=False)


#: The filter's rules as a submission's spend line names them.
RULE_WORDS = {
    "one_batch": "the one-batch rule (the count release and one batch of jobs, composed tightly)",
    "renyi_filter": "the Rényi filter (jobs chosen one after another)",
}


def _print_spend(api: Api, dataset: str) -> None:
    """The dataset's spend with this job reserved, composed and as a plain sum: why jobs whose
    epsilons add up to more than the budget were all admitted (they compose; and one that
    charges other label groups than the binding one adds nothing)."""
    try:
        budget = api.call("GET", f"/v1/datasets/{dataset}/budget")
    except ClientError:  # only a hint: the job is submitted either way
        return
    spent, total, plain = budget["spent"], budget["epsilon"], budget["plain_sum"]
    rule = RULE_WORDS.get(budget.get("rule") or "", "the ledger's filter")
    line = (
        f"dataset spend now {spend_text(spent)} of {spend_text(total)} "
        f"({budget_percent(spent / total)}), composed over {budget['live_jobs']} job(s) by "
        f"{rule}"
    )
    if budget.get("delta"):  # where the spend holds (a plain sum holds elsewhere)
        line += f", at delta {delta_text(budget['delta'])}"
    if plain > spent * (1 + 1e-9):
        line += (
            f"; their epsilons sum to {spend_text(plain)}{_at_delta(budget, 'plain_sum_delta')}, "
            "but composed privacy loss grows "
            "slower than the sum, and only the most-charged label group counts "
            f"('dpsyn budget show {dataset}')"
        )
    if budget.get("counts_epsilon"):
        line += (
            f"; of it, epsilon {spend_text(budget['counts_epsilon'])} is the dataset's count "
            "release, charged once for the dataset"
        )
    err.print(line, markup=False)


def _print_coverage(api: Api, job: dict[str, Any]) -> None:
    """Under the settings line, how many of the dataset's labels the job's shots cover (each
    shot's label is drawn without replacement, so ``min(shots, labels)``), from the dataset's
    public task spec."""
    if not job["shots"]:
        return
    try:
        dataset = api.call("GET", f"/v1/datasets/{job['dataset_id']}")
    except ClientError:  # only a hint: the job is submitted either way
        return
    labels = dataset["task"].get("labels") or []
    if labels:
        shots = job["shots"]
        err.print(shots_coverage(shots, min(shots, len(labels)), len(labels)), markup=False)


# The options a job is described by, shared by ``jobs submit`` and ``jobs quote``.
DatasetOpt = Annotated[
    str, typer.Option("--dataset", help="Private dataset ID, or its unique name.")
]
EpsilonOpt = Annotated[float, typer.Option("--epsilon", help="This job's epsilon (> 0).")]
MethodOpt = Annotated[
    str | None, typer.Option("--method", help="A method the server has (default: the server's).")
]
PublicDatasetOpt = Annotated[
    str | None,
    typer.Option("--public-dataset", help="ID of a public dataset, for a method that reads one."),
]
ValidationDatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--validation-dataset",
        help="ID of a public labelled dataset (upload --public --labelled): the stored prompt "
        "is scored on it; no privacy cost.",
    ),
]
ShotsOpt = Annotated[
    int | None,
    typer.Option(
        "--shots",
        help="The job's shots (demonstrations, for most methods). Default: one per label for "
        f"a task of at most {COVER_EVERY_LABEL_UP_TO} labels (at least {DEFAULT_SHOTS}), else "
        f"{DEFAULT_SHOTS}.",
    ),
]
DeltaOpt = Annotated[float | None, typer.Option("--delta", help="Default: the budget's delta.")]
AccountingOpt = Annotated[
    Accounting | None, typer.Option("--accounting", help="Default: the budget's.")
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        help="A method parameter as NAME=VALUE, repeatable; or give it as --NAME VALUE "
        "(spelled as in 'dpsyn synthesize': --teacher-shots 2). The API's JobParams (GET "
        "/openapi.json) lists each method's.",
    ),
]


@dataclass(frozen=True)
class JobOptions:
    """A job as ``jobs submit`` and ``jobs quote`` both describe it (an option group,
    :func:`~app.cli.options.with_groups`); None: the server's default."""

    dataset: DatasetOpt
    epsilon: EpsilonOpt
    method: MethodOpt = None
    public_dataset: PublicDatasetOpt = None
    validation_dataset: ValidationDatasetOpt = None
    shots: ShotsOpt = None
    delta: DeltaOpt = None
    accounting: AccountingOpt = None
    param: ParamOpt = None

    def body(self, extra: list[str]) -> dict[str, Any]:
        """The ``POST /v1/jobs`` body: the fields given and the method parameters
        (``--NAME VALUE`` in ``extra``, and ``--param NAME=VALUE``); a bad ``--epsilon``
        stops here."""
        if not is_epsilon(self.epsilon):
            raise ClientError(f"--epsilon must be a positive number, got {self.epsilon:g}", code=2)
        fields = {
            "dataset_id": self.dataset,
            "method": self.method,
            "epsilon": self.epsilon,
            "shots": self.shots,
            "delta": self.delta,
            "accounting": self.accounting.value if self.accounting is not None else None,
            "public_dataset_id": self.public_dataset,
            "validation_dataset_id": self.validation_dataset,
        }
        body: dict[str, Any] = {name: value for name, value in fields.items() if value is not None}
        if given := {**_flag_params(extra), **_parse_params(self.param or [])}:
            body["params"] = given
        return body


def _job_body(job_options: JobOptions, ctx: typer.Context) -> dict[str, Any]:
    """:meth:`JobOptions.body` with the command's other arguments; a problem in them ends
    the command (exit status 2) before the server is asked anything."""
    try:
        return job_options.body(list(ctx.args))
    except ClientError as error:
        exit_with(error)


# A method's own parameters come as --NAME VALUE: options the command does not declare.
METHOD_FLAGS = {"ignore_unknown_options": True, "allow_extra_args": True}


@jobs_app.command("submit", context_settings=METHOD_FLAGS)
def jobs_submit(
    ctx: typer.Context,
    job_options: JobOptions,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait for the job, with progress.")
    ] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between polls.")] = 1.0,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")
    ] = None,
    *,
    server: Reply,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet/--no-quiet", "-q", help="Print only the job ID (with --wait: prompt ID)."
        ),
    ] = False,
) -> None:
    """Submit a synthesis job; its cost is reserved against the dataset's budget.

    Any method parameter goes as --NAME VALUE (--M 4, --max-public 40) or --param NAME=VALUE;
    the server refuses one its method does not take, naming the methods that do. A method
    that reads public texts also needs --public-dataset (uploaded with 'dpsyn datasets upload
    --public'); they are never charged."""
    body = _job_body(job_options, ctx)
    with server.session() as api:
        job = api.call("POST", "/v1/jobs", json=body)
        if not quiet and not server.as_json:
            out.print(_describe_job(job), markup=False)
            if job.get("settings"):
                err.print(job["settings"], markup=False)
                _print_coverage(api, job)
            _print_spend(api, job["dataset_id"])
        validation = None
        if wait:
            job, validation = _wait(api, job, interval=poll, timeout=timeout)
    _show_submitted(job, validation, wait=wait, quiet=quiet, server=server)


@jobs_app.command("submit-batch")
def jobs_submit_batch(
    plan: Annotated[
        Path,
        typer.Argument(
            help='A JSON file: a list of jobs (or {"jobs": [...]}), each as POST /v1/jobs '
            "takes one, all on one dataset.",
            exists=True,
            dir_okay=False,
        ),
    ],
    *,
    server: Reply,
    quiet: Annotated[
        bool, typer.Option("--quiet/--no-quiet", "-q", help="Print only the job IDs, one a line.")
    ] = False,
) -> None:
    """Submit several jobs declared together, before any of them runs (a team's plan): all
    are admitted or none, and the ledger records them as one batch, so the budget's filter
    prices them as one mechanism, composed tightly, instead of as jobs chosen one after
    another (docs/privacy.md, "Declared batches")."""
    try:
        body = json.loads(plan.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        exit_with(ClientError(f"{plan}: not a JSON file of jobs ({type(error).__name__})"))
    if isinstance(body, list):
        body = {"jobs": body}
    jobs = server.request("POST", "/v1/jobs/batch", json=body)
    if quiet and not server.as_json:
        typer.echo("\n".join(job["id"] for job in jobs))
        return
    server.show(jobs, _print_batch)


def _print_batch(jobs: list[dict[str, Any]]) -> None:
    for job in jobs:
        out.print(_describe_job(job), markup=False)


@jobs_app.command("quote", context_settings=METHOD_FLAGS)
def jobs_quote(ctx: typer.Context, job_options: JobOptions, *, server: Reply) -> None:
    """What a job would cost, before it is submitted (the dashboard's "Check the cost"):
    planned and checked as 'jobs submit' plans it, nothing reserved, with each label's noise
    multiplier. The dataset's spend is composed, so a job may add less than its own epsilon
    to it, or nothing. It takes every option 'jobs submit' takes: a validation set is checked
    as a submission checks it and costs nothing (scoring on public records is post-processing).

    The same request plans the same job (the same epsilon, noise and labels) in every quote
    and in its submission; another job admitted meanwhile changes the spend. The first plan
    of a dataset whose counts are not declared public draws its count release, charged once
    to the budget (the quote's spend includes it)."""
    quote = server.request("POST", "/v1/jobs/quote", json=_job_body(job_options, ctx))
    server.show(quote, print_quote)


def _at_delta(body: dict[str, Any], field: str) -> str:
    """ " at delta 1e-6" for the server's ``field`` (a delta), "" where an older server does
    not say it."""
    return f" at delta {delta_text(body[field])}" if body.get(field) else ""


def print_quote(quote: dict[str, Any]) -> None:
    """The quote in words: the job's epsilon, the dataset's composed spend before and after
    (and the plain sum, which composition beats), whether it fits, and per label group."""
    budget = quote["budget"]
    after = quote["spent_after"]
    typer.echo(
        f"this job: epsilon {spend_text(quote['epsilon'])} at delta {delta_text(quote['delta'])} "
        "(reserved when submitted)"
    )
    plain = quote["plain_sum_after"]
    why = f" ({SUM_BELOW})" if quote.get("plain_sum_delta_after") and plain < after else ""
    typer.echo(
        f"dataset {quote['dataset_id']}{_at_delta(quote, 'spent_delta')}: spent "
        f"{spend_text(quote['spent'])} of {spend_text(budget)} now, {spend_text(after)} "
        f"({budget_percent(after / budget)}) if admitted; a plain sum would say "
        f"{spend_text(plain)}{_at_delta(quote, 'plain_sum_delta_after')}{why}"
    )
    if quote.get("rule_after") in RULES:
        typer.echo(f"priced by {RULES[quote['rule_after']]}")
    if quote.get("counts_epsilon"):
        typer.echo(
            f"of which the dataset's count release: epsilon {spend_text(quote['counts_epsilon'])} "
            f"({share_text(quote['counts_epsilon'] / budget)} of the budget), charged once for "
            "the dataset, not by this job"
        )
    _print_noise(quote.get("noise") or {})
    if quote["fits"]:
        typer.echo(f"fits: {spend_text(max(budget - after, 0.0))} would remain")
    else:
        typer.echo(
            f"does not fit: {spend_text(after - budget)} over the budget; it would be refused"
        )
    if quote["groups"]:
        _print_group_changes(quote["groups"])


def _print_noise(noise: dict[str, float]) -> None:
    """Each label's noise multiplier, one line (each label is calibrated to its own
    released size); nothing when the method has none per label."""
    if noise:
        listed = ", ".join(f"{label} {sigma:.4g}" for label, sigma in noise.items())
        out.print(f"noise sigma per label: {listed}", markup=False)


def _print_group_changes(groups: list[dict[str, Any]]) -> None:
    """Each label group's spend before and after, and which sets the dataset's spend."""
    print_label_groups(
        "per label group (the dataset's spend is the largest group's; a job that charges "
        "only other groups adds nothing to it):",
        {
            "before": lambda group: spend_text(group["before"]),
            "after": lambda group: spend_text(group["after"]),
            "charged": lambda group: "yes" if group["charged"] else "",
            "sets the spend": lambda g: _binding_change(g["binding_before"], g["binding_after"]),
        },
        groups,
    )


def _binding_change(before: bool, after: bool) -> str:
    if before and after:
        return "yes"
    if after:
        return "after the job"
    return "before the job" if before else ""


def _print_job(job: dict[str, Any]) -> None:
    """The one-line description of a job."""
    out.print(_describe_job(job), markup=False)


# What a job's ``counts`` field says, in words.
JOB_COUNTS = {
    "released": "planned with the dataset's count release (released once under DP, charged "
    "once to its budget: 'dpsyn budget show')",
    "declared_public": "declared public by the dataset's owner: planned with the exact counts, "
    "none released",
}


@jobs_app.command("show")
def jobs_show(job_id: JobIdArg, server: Reply) -> None:
    """A job's status, progress, cost and result, and the key that submitted it."""
    server.show(server.request("GET", f"/v1/jobs/{job_id}"), _print_job_details)


def _print_job_details(job: dict[str, Any]) -> None:
    """``jobs show``: the job's line, where its counts came from, its noise, its submitter."""
    _print_job(job)
    if (counts := JOB_COUNTS.get(job.get("counts") or "")) is not None:
        out.print(f"label counts: {counts}", markup=False)
    _print_noise(job.get("noise") or {})
    submitter = job.get("submitted_by")
    out.print(
        f"submitted by key {submitter}" if submitter else "submitter not recorded",
        markup=False,
    )


@jobs_app.command("wait")
def jobs_wait(
    job_id: JobIdArg,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between polls.")] = 1.0,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")
    ] = None,
    *,
    server: Reply,
    quiet: Annotated[
        bool, typer.Option("--quiet/--no-quiet", "-q", help="Print only the prompt ID.")
    ] = False,
) -> None:
    """Wait for a job submitted earlier, with progress, as 'jobs submit --wait' does (and
    for its validation score if it named a validation set); exit 1 unless it succeeded."""
    with server.session() as api:
        job = api.call("GET", f"/v1/jobs/{job_id}")
        job, validation = _wait(api, job, interval=poll, timeout=timeout)
    _show_submitted(job, validation, wait=True, quiet=quiet, server=server)


@jobs_app.command("cancel")
def jobs_cancel(job_id: JobIdArg, server: Reply) -> None:
    """Cancel a job (a running one stops at its next step); says what it is charged and why."""
    server.show(server.request("POST", f"/v1/jobs/{job_id}/cancel"), _print_job)


def _asked(job: dict[str, Any]) -> str:
    """ " (2 asked)" beside a planned epsilon that differs from the one asked (newer servers
    say it); "" otherwise."""
    asked = job.get("epsilon_asked")
    if asked is None or spend_text(asked) == spend_text(job["epsilon"]):
        return ""
    return f" ({spend_text(asked)} asked)"


def _charged(job: dict[str, Any]) -> str:
    """The charged epsilon when the server says it (newer servers), else the job's cost."""
    value = job.get("charged_epsilon", job["epsilon"])
    return "-" if value is None else spend_text(value)


@jobs_app.command("list")
def jobs_list(
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Only jobs on this dataset (ID or name).")
    ] = None,
    status: Annotated[
        JobStatus | None, typer.Option("--status", help="Only jobs in this state.")
    ] = None,
    limit: LimitOpt = 100,
    offset: OffsetOpt = 0,
    *,
    server: Reply,
) -> None:
    """Your jobs, newest first: status, method, epsilon, dataset and prompt."""
    params = _page(limit, offset, dataset_id=dataset, status=status.value if status else None)
    server.show(server.request("GET", "/v1/jobs", params=params), _print_jobs)


def _print_jobs(rows: list[dict[str, Any]]) -> None:
    """``jobs list``'s table (the charged column when the server says it)."""
    charged = any("charged_epsilon" in row for row in rows)
    print_rows(
        ["id", "status", "method", "epsilon", *(["charged"] if charged else []), "dataset",
         "prompt", "created"],
        [
            [
                row["id"],
                row["status"],
                row["method"],
                spend_text(row["epsilon"]),
                *([_charged(row)] if charged else []),
                _dataset_cell(row),
                row.get("prompt_id") or "-",
                shown_time(row["created_at"]),
            ]
            for row in rows
        ],
    )  # fmt: skip
