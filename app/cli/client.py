"""Client commands of a running dpsyn server: ``dpsyn datasets|budget|jobs|prompts ...``.

Every command takes ``--url`` (``DPSYN_URL``) and ``--key`` (``DPSYN_API_KEY``); without them
the URL and key ``dpsyn serve`` saved in ``./.dpsyn/`` are used, else the user's config
(``~/.config/dpsyn/config.toml``, ``dpsyn config set``), else http://127.0.0.1:8000
(:mod:`app.cli.config`).
A server error is printed as its message on one line, in the CLI's words (options and
commands, :mod:`app.cli.vocabulary`), and the command exits with status 1 (2 for a usage or
local file problem). ``--json`` prints the server's JSON instead of text; ``-q`` prints only
the ID of what was created. The HTTP client is :mod:`app.cli.http_client`; ``dpsyn keys`` is
in :mod:`app.cli.keys`. Each group's commands (upload, list, show, delete ...) are all here,
so that importing a group brings every one of its commands. ``prompts get`` and
``prompts complete`` go through the downstream apps' client (:mod:`dpsyn_client.client`), so the CLI
exercises what an app uses.
"""

from __future__ import annotations

import hashlib
import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.custom_task import (
    custom_task,
    given_flags,
    label_counts_line,
    parse_column,
    parse_pairs,
    shots_coverage,
)
from app.cli.http_client import (
    Api,
    ClientError,
    JsonOpt,
    KeyOpt,
    QuietOpt,
    UrlOpt,
    YesOpt,
    confirm,
    err,
    exit_with,
    one_line,
    out,
    print_json,
    print_rows,
    prompt_client,
    request,
)
from app.cli.options import (
    ANSWER_WORDS,
    ICL_INSTRUCTION,
    INSTRUCTION,
    LABEL_COL,
    LABEL_FIELD,
    LABEL_MAP,
    LABELS,
    TEXT_COL,
    TEXT_FIELD,
)
from app.cli.progress import progress_reporter
from app.cli.vocabulary import in_cli_words
from app.db.models import TERMINAL_STATUSES, JobStatus
from app.privacy.accounting import Accounting
from app.privacy.budget import (
    budget_percent,
    is_epsilon,
    percent_text,
    spend_text,
    warn_fraction,
)
from app.privacy.unit import DEFAULT_DELTA
from app.synthesis.config import COVER_EVERY_LABEL_UP_TO, DEFAULT_SHOTS
from app.synthesis.data import Column

TABLE_SUFFIXES = {".csv", ".tsv", ".jsonl", ".ndjson"}


# The positional IDs the show, get and delete commands take.
DatasetIdArg = Annotated[str, typer.Argument(help="Dataset ID, or its unique name.")]
JobIdArg = Annotated[str, typer.Argument(help="Job ID.")]
LimitOpt = Annotated[
    int, typer.Option("--limit", min=1, max=500, help="At most this many rows (newest first).")
]
OffsetOpt = Annotated[int, typer.Option("--offset", min=0, help="Skip this many rows first.")]


def _page(limit: int, offset: int, **filters: str | None) -> dict[str, Any]:
    """Query parameters: the page, and the filters given."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    params.update({name: value for name, value in filters.items() if value is not None})
    return params


# --- datasets -------------------------------------------------------------------------------

datasets_app = typer.Typer(
    help="Datasets on the server: private (labelled) or public (texts for PromptPATE).",
    no_args_is_help=True,
)


def _task_field(task: str) -> tuple[str, Any]:
    """What the server gets for ``--task``: a built-in name, or a spec file as JSON."""
    from app.synthesis.tasks import BUILTIN_TASKS, TaskError, get_task

    if task.lower() in BUILTIN_TASKS:
        return task.lower(), BUILTIN_TASKS[task.lower()]
    try:
        spec = get_task(Path(task))
    except TaskError as error:
        raise ClientError(str(error), code=2) from None
    return spec.model_dump_json(), spec


def _private_task(
    task: str | None, custom: dict[str, str | None], label_map: dict[str, str] | None
) -> tuple[str, Any]:
    """The ``task`` form field and spec: ``--task`` (built-in or spec file) or, as in
    ``dpsyn synthesize``, a custom task from ``--labels``/``--label-map`` and friends."""
    from app.synthesis.tasks import TaskError

    given = given_flags(custom)
    if task not in (None, "custom"):
        if given:
            raise ClientError(
                f"{', '.join(given)}: only for a custom task, not --task {task}", code=2
            )
        return _task_field(task)
    if not (given or label_map):
        raise ClientError(
            "--task is required for a private dataset: trec|trec14|agnews|sst2|mitg|mitd, a spec "
            "file, or a custom task with --labels a,b,... (or upload texts with --public)",
            code=2,
        )
    try:
        spec = custom_task(custom, label_map)
    except TaskError as error:
        raise ClientError(str(error), code=2) from None
    return spec.model_dump_json(), spec


def _upload_parts(
    path: Path,
    task: tuple[str, Any],
    text_col: Column | None,
    label_col: Column | None,
    label_map: dict[str, str] | None,
    name: str | None,
) -> tuple[dict[str, str], tuple[str, bytes, str]]:
    """Form fields and the file part. A table (CSV/TSV/JSONL) with named columns goes as it
    is; a dataset in its own format (TREC or SST-2 lines, AG News CSV without header, MIT
    BIO), a CSV without a header (column numbers) or one whose labels need ``--label-map`` is
    read here by the same readers as ``dpsyn synthesize`` and sent as JSON lines."""
    from app.synthesis.data import DataError, load_dataset

    if not path.is_file():
        raise ClientError(f"{path}: no such file", code=2)
    task_value, spec = task
    # Without --name the server names a dataset after its task ("trec", not "train").
    fields = {"task": task_value, **({"name": name} if name else {})}
    numbered = isinstance(text_col, tuple) or isinstance(label_col, tuple)
    native = (
        path.suffix.lower() not in TABLE_SUFFIXES
        or (spec.name == "agnews" and text_col is None and label_col is None)
        or numbered
        or bool(label_map)
    )
    if not native:
        if isinstance(text_col, str):
            fields["text_column"] = text_col
        if isinstance(label_col, str):
            fields["label_column"] = label_col
        return fields, (path.name, path.read_bytes(), "application/octet-stream")
    try:
        records = load_dataset(
            spec, path, text_col=text_col, label_col=label_col, label_map=label_map
        )
    except DataError as error:
        raise ClientError(str(error), code=2) from None
    if label_map and (counts := label_counts_line(spec, (r.label for r in records))):
        err.print(counts, markup=False)
    lines = (json.dumps({"text": r.text, "label": r.label}, ensure_ascii=False) for r in records)
    body = ("\n".join(lines) + "\n").encode("utf-8")
    return fields, (f"{path.stem}.jsonl", body, "application/x-ndjson")


def _public_upload_parts(
    path: Path, task: str | None, text_col: str | None, name: str | None
) -> tuple[dict[str, str], tuple[str, bytes, str]]:
    """Form fields and the file part of a public upload (unlabelled texts for PromptPATE).

    A table (CSV/TSV/JSONL) goes as it is and the server reads its text column (any label
    column is ignored); a built-in task's own format (``--task sst2`` on SST-2 lines) or a
    plain text file (one text per line) is read here and sent as JSON lines of texts.
    """
    from app.pate.public import read_public
    from app.synthesis.data import DataError, load_dataset

    if not path.is_file():
        raise ClientError(f"{path}: no such file", code=2)
    fields = {"public": "true", "name": name or path.stem}
    spec = None
    if task is not None:
        fields["task"], spec = _task_field(task)
    table = path.suffix.lower() in TABLE_SUFFIXES and not (
        spec is not None and spec.name == "agnews" and text_col is None
    )
    if table:
        if text_col:
            fields["text_column"] = text_col
        return fields, (path.name, path.read_bytes(), "application/octet-stream")
    try:
        if spec is not None:
            texts = [record.text for record in load_dataset(spec, path)]
        else:
            texts = read_public(path)
    except DataError as error:
        raise ClientError(str(error), code=2) from None
    lines = (json.dumps({"text": text}, ensure_ascii=False) for text in texts)
    body = ("\n".join(lines) + "\n").encode("utf-8")
    return fields, (f"{path.stem}.jsonl", body, "application/x-ndjson")


def describe_dataset(dataset: dict[str, Any]) -> str:
    task = dataset["task"].get("name")
    if dataset.get("kind") == "public" and dataset.get("label_counts"):
        counts = ", ".join(f"{label} {n}" for label, n in dataset["label_counts"].items())
        return (
            f"dataset {dataset['id']} '{dataset['name']}' (public, labelled: a validation "
            f"set, never charged): {dataset['record_count']} records, task {task} ({counts})"
        )
    if dataset.get("kind") == "public":
        about = f", task {task}" if task else ""
        return (
            f"dataset {dataset['id']} '{dataset['name']}' (public, never charged): "
            f"{dataset['record_count']} texts{about}"
        )
    counts = ", ".join(f"{label} {n}" for label, n in dataset["label_counts"].items())
    declared = "; counts declared public" if dataset.get("counts_public") else ""
    return (
        f"dataset {dataset['id']} '{dataset['name']}': {dataset['record_count']} records, "
        f"task {task or '?'} ({counts}){declared}"
    )


def counts_line(dataset: dict[str, Any]) -> str | None:
    """What a private dataset's label counts are to its jobs, with when and by which key
    that was chosen (None: a public dataset, or a server that does not say)."""
    if dataset.get("kind") == "public" or "counts_public" not in dataset:
        return None
    at, by = dataset.get("counts_public_at"), dataset.get("counts_public_by")
    who = f" by key {by}" if by else ""
    if dataset["counts_public"]:
        when = f" ({at[:19]}{who})" if at else ""
        return (
            f"label counts: declared public{when}: jobs plan with the exact counts and release "
            "none; paper accounting is allowed"
        )
    withdrawn = f" (declaration withdrawn {at[:19]}{who})" if at else ""
    return (
        f"label counts: private{withdrawn}: each job releases the counts it plans with under "
        "DP, charged in its epsilon; paper accounting needs them declared public "
        f"(dpsyn datasets counts-public {dataset['id']})"
    )


def _check_public_options(
    custom: dict[str, str | None],
    text_col: str | None,
    label_col: str | None,
    label_map: str | None,
) -> None:
    """Refuse the options of a labelled dataset on a public upload, naming the option."""
    if label_col is not None:
        raise ClientError("--label-col: a public dataset has no labels", code=2)
    if given := given_flags(custom):
        raise ClientError(f"{given[0]}: a public dataset has no task labels", code=2)
    if label_map is not None:
        raise ClientError("--label-map: a public dataset has no labels", code=2)
    if isinstance(parse_column(text_col), tuple):
        raise ClientError(
            "--text-col: a public table needs a header and a column name "
            "(column numbers are for private datasets)",
            code=2,
        )


def print_dataset(dataset: dict[str, Any]) -> None:
    """The dataset's line, and its counts line when it has one (``datasets show`` and
    ``datasets counts-public``)."""
    out.print(describe_dataset(dataset), markup=False)
    if (line := counts_line(dataset)) is not None:
        out.print(line, markup=False)


def _dataset_parts(
    file: Path,
    task: str | None,
    public: bool,
    labelled: bool,
    custom: dict[str, str | None],
    columns: tuple[str | None, str | None, str | None],
    name: str | None,
    counts_public: bool = False,
) -> tuple[dict[str, str], tuple[str, bytes, str]]:
    """Form fields and file part of ``datasets upload``: public texts, or labelled records
    (private, or with ``--labelled`` a public validation set, read the same way), private
    ones with the owner's declaration that their label counts are public if given."""
    text_col, label_col, label_map = columns
    if counts_public and public:
        raise ClientError(
            "--public-counts: only for a private dataset (a public one is public whole)", code=2
        )
    if labelled and not public:
        raise ClientError("--labelled: only with --public (a private dataset always is)", code=2)
    if public and not labelled:
        _check_public_options(custom, text_col, label_col, label_map)
        fields, part = _public_upload_parts(file, task, text_col, name)
    else:
        if labelled and task is None:
            raise ClientError(
                "--task: required with --labelled (the labels must be the task's)", code=2
            )
        try:
            pairs = parse_pairs(label_map, "--label-map") if label_map else None
        except ValueError as error:
            raise ClientError(str(error), code=2) from None
        fields, part = _upload_parts(
            file,
            _private_task(task, custom, pairs),
            parse_column(text_col),
            parse_column(label_col),
            pairs,
            name,
        )
        if labelled:  # a public validation set, named after its file as --public is
            fields.update(public="true", labelled="true", name=name or file.stem)
        if counts_public:
            fields["counts_public"] = "true"
    return fields, part


LABELLED = typer.Option(
    "--labelled",
    help="With --public: keep the labels (read as for a private dataset, --task required): "
    "a validation set for 'jobs submit --validation-dataset'.",
)
PUBLIC_COUNTS = typer.Option(
    "--public-counts",
    help="Private: declare the records per label public (jobs then plan with the exact counts "
    "and release none; paper accounting needs it). Default: private, each job releases them "
    "under DP. Change later with 'dpsyn datasets counts-public'.",
)


@datasets_app.command("upload")
def datasets_upload(
    file: Annotated[Path, typer.Argument(help="CSV/TSV/JSONL, or a built-in task's format.")],
    task: Annotated[
        str | None,
        typer.Option(
            "--task", help="trec|trec14|agnews|sst2|mitg|mitd or a spec (required unless --public)."
        ),
    ] = None,
    public: Annotated[
        bool,
        typer.Option(
            "--public",
            help="Public unlabelled texts for PromptPATE jobs (text column only; never charged).",
        ),
    ] = False,
    labelled: Annotated[bool, LABELLED] = False,
    public_counts: Annotated[bool, PUBLIC_COUNTS] = False,
    text_col: Annotated[str | None, TEXT_COL] = None,
    label_col: Annotated[str | None, LABEL_COL] = None,
    label_map: Annotated[str | None, LABEL_MAP] = None,
    labels: Annotated[str | None, LABELS] = None,
    answer_words: Annotated[str | None, ANSWER_WORDS] = None,
    instruction: Annotated[str | None, INSTRUCTION] = None,
    icl_instruction: Annotated[str | None, ICL_INSTRUCTION] = None,
    text_field: Annotated[str | None, TEXT_FIELD] = None,
    label_field: Annotated[str | None, LABEL_FIELD] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Default: the task's name (the file name for --public)."),
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Upload a private labelled dataset, or with --public unlabelled texts, or with --public
    --labelled a public validation set (its records never come back)."""
    custom = {
        "labels": labels,
        "answer_words": answer_words,
        "instruction": instruction,
        "icl_instruction": icl_instruction,
        "text_field": text_field,
        "label_field": label_field,
    }
    try:
        fields, part = _dataset_parts(
            file,
            task,
            public,
            labelled,
            custom,
            (text_col, label_col, label_map),
            name,
            public_counts,
        )
        with Api(url, key) as api:
            dataset = api.call("POST", "/v1/datasets", data=fields, files={"file": part})
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(dataset)
    elif quiet:
        typer.echo(dataset["id"])
    else:
        out.print(describe_dataset(dataset), markup=False)


@datasets_app.command("list")
def datasets_list(
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Also datasets whose records were deleted.")
    ] = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List your datasets, with each private one's spend against its budget."""
    params = {"include_deleted": "true"} if include_deleted else {}
    with_budgets = not as_json
    try:
        with Api(url, key) as api:
            rows = api.call("GET", "/v1/datasets", params=params)
            budgets = api.call("GET", "/v1/budgets") if with_budgets else []
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(rows)
        return
    spend = {budget["dataset_id"]: _spend_cell(budget) for budget in budgets}
    print_rows(
        ["id", "name", "kind", "task", "records", "counts", "spent", "created"],
        [
            [
                row["id"],
                row["name"],
                row.get("kind", "private"),
                row["task"].get("name", "-"),
                str(row["record_count"]),
                _counts_cell(row),
                spend.get(row["id"], "no budget" if row.get("kind") == "private" else "-"),
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )


def _spend_cell(budget: dict[str, Any]) -> str:
    """``1.25/10 (12%, ok)``: composed spend of the budget, its share, its level."""
    share = budget_percent(budget["spent_fraction"])
    return f"{spend_text(budget['spent'])}/{budget['epsilon']:g} ({share}, {budget['level']})"


def _counts_cell(row: dict[str, Any]) -> str:
    """The list's counts column: declared public or private (a public dataset: -)."""
    if row.get("kind") == "public" or "counts_public" not in row:
        return "-"
    return "public" if row["counts_public"] else "private"


@datasets_app.command("counts-public")
def datasets_counts_public(
    dataset_id: Annotated[str, typer.Argument(help="Private dataset ID, or its unique name.")],
    withdraw: Annotated[
        bool,
        typer.Option("--withdraw", help="Make the counts private again (jobs release them)."),
    ] = False,
    yes: YesOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare a private dataset's records per label public, or with --withdraw make them
    private again. Applies to jobs submitted afterwards; recorded with the time and your key.

    Declared public, jobs plan with the exact counts and release none, and paper accounting
    is allowed: declare them only if anyone who reads a prompt may know them. Private (the
    default), each job releases the counts it plans with under DP, charged in its epsilon."""
    if not withdraw:
        confirm(
            f"Declare the label counts of dataset {dataset_id} public? Jobs submitted from now "
            "on plan with the exact counts and release none, so a prompt's readers may learn "
            "them.",
            yes,
        )
    path = f"/v1/datasets/{dataset_id}/counts-public"
    dataset = request(url, key, "PUT", path, json={"public": not withdraw})
    if as_json:
        print_json(dataset)
        return
    print_dataset(dataset)


@datasets_app.command("show")
def datasets_show(
    dataset_id: DatasetIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A dataset's metadata: name, kind, task, records per label (never a record)."""
    dataset = request(url, key, "GET", f"/v1/datasets/{dataset_id}")
    if as_json:
        print_json(dataset)
        return
    print_dataset(dataset)
    typer.echo(f"created {dataset['created_at'][:19]}")
    if dataset.get("deleted_at"):
        typer.echo(f"records deleted {dataset['deleted_at'][:19]} (its ledger stays)")


@datasets_app.command("delete")
def datasets_delete(
    dataset_id: DatasetIdArg,
    yes: YesOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a dataset's records for good. Its queued jobs are cancelled (a running one must
    be cancelled first); the dataset's row, budget ledger and prompts stay."""
    try:
        with Api(url, key) as api:
            dataset = api.call("GET", f"/v1/datasets/{dataset_id}")
            deleted = None
            if not dataset.get("deleted_at"):
                confirm(
                    f"Delete the {dataset['record_count']} records of dataset {dataset_id} "
                    f"'{dataset['name']}'? Its ledger and prompts stay; this cannot be undone.",
                    yes,
                )
                deleted = api.call("DELETE", f"/v1/datasets/{dataset_id}")
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(deleted or dataset)
    elif deleted is None:
        typer.echo(f"dataset {dataset_id}'s records were already deleted; nothing changed")
    else:
        typer.echo(f"deleted the records of dataset {dataset_id} '{deleted['name']}'")


# --- budget ---------------------------------------------------------------------------------

budget_app = typer.Typer(help="A dataset's privacy budget and ledger.", no_args_is_help=True)


def _print_budget(budget: dict[str, Any], *, history: bool) -> None:
    """The budget line, the spend per label group (which group sets the dataset's spend, and
    why a job can add 0) and, with ``history``, the ledger with each closing entry's reason."""
    share = budget.get("spent_fraction")
    level = f" ({budget_percent(share)}, {budget['level']})" if share is not None else ""
    out.print(
        f"budget of dataset {budget['dataset_id']}: epsilon {budget['epsilon']:g} at delta "
        f"{budget['delta']:.3g} ({budget['accounting']} accounting); spent "
        f"{spend_text(budget['spent'])}{level} (plain sum {spend_text(budget['plain_sum'])}) "
        f"by {budget['live_jobs']} job(s), {spend_text(budget['remaining'])} remaining",
        markup=False,
    )
    if "warn_threshold" in budget:
        typer.echo(f"warns at {percent_text(budget['warn_threshold'])} of the budget")
    _print_count_releases(budget)
    _print_delta(budget)
    _print_label_groups(budget.get("label_groups") or [])
    if history and budget["history"]:
        typer.echo("ledger:")
        _print_ledger(budget["history"])


def share_text(fraction: float) -> str:
    """A count release's share of the budget, to the digits it has (its epsilon is the
    share's, recomputed from its noise: 0.04998 reads "5%", not a floored "4%")."""
    return f"{fraction * 100:.3g}%"


def _print_count_releases(budget: dict[str, Any]) -> None:
    """The dataset's count release(s), each a line of its own: charged once for the dataset
    (once per version of its records), not by any job. Nothing for a server or a ledger
    without one."""
    for release in budget.get("count_releases") or []:
        which = "" if release.get("current", True) else " (of records since changed)"
        out.print(
            f"count release: epsilon {spend_text(release['epsilon'])} "
            f"({share_text(release['share'])} of the budget) at delta {release['delta']:.3g}, "
            f"noise sigma {release['sigma']:.4g} per label count, once for this "
            f"dataset{which}",
            markup=False,
        )


def _ledger_job(entry: dict[str, Any]) -> str:
    """An entry's job cell: the job, or the count release a ``counts`` entry charges."""
    if entry["kind"] == "counts":
        return f"count release {entry.get('count_release_id') or entry['job_id']}"
    return str(entry["job_id"])


def _print_ledger(history: list[dict[str, Any]]) -> None:
    """The ledger's entries, oldest first, with each closing entry's reason."""
    print_rows(
        ["time", "kind", "job", "epsilon", "delta", "reason"],
        [
            [
                entry["created_at"][:19],
                entry["kind"],
                _ledger_job(entry),
                spend_text(entry["epsilon"]),
                f"{entry['delta']:.3g}",
                entry.get("reason") or "",
            ]
            for entry in history
        ],
    )


DELTA_SOURCES = {
    "default": "the public default, chosen independent of the dataset",
    "owner": "set by the owner",
    "former_default": "1/|D| of this dataset, the default of budgets set before counts "
    "became private",
}


def _print_delta(budget: dict[str, Any]) -> None:
    """Where the budget's delta comes from, and the server's warnings on the delta and the
    accounting (in the CLI's words), when it gives them."""
    source = DELTA_SOURCES.get(budget.get("delta_source") or "")
    if source is not None:
        typer.echo(f"delta {budget['delta']:.3g}: {source} (every prompt carries its job's delta)")
    for name in ("delta_note", "accounting_note"):
        if budget.get(name):
            err.print(f"warning: {in_cli_words(one_line(budget[name]))}", markup=False)


def _print_label_groups(groups: list[dict[str, Any]]) -> None:
    """Each label group's composed spend; the largest is the dataset's spend."""
    if len(groups) < 2:
        return
    typer.echo(
        "spend per label group (each group's records are priced apart; the dataset's spend "
        "is the largest, so a job that charges only other groups adds 0 to it):"
    )
    print_rows(
        ["labels", "spent", "remaining", "jobs", ""],
        [
            [
                ", ".join(group["labels"]) or "(all records)",
                spend_text(group["spent"]),
                spend_text(group["remaining"]),
                str(group["jobs"]),
                "sets the spend" if group["binding"] else "",
            ]
            for group in groups
        ],
    )


@budget_app.command("set")
def budget_set(
    dataset: DatasetIdArg,
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total epsilon (> 0).")],
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help=f"Public; default: unchanged, a new budget {DEFAULT_DELTA:g} (the same for "
            "every dataset). Above 1/|D| is accepted with a warning.",
        ),
    ] = None,
    accounting: Annotated[Accounting, typer.Option("--accounting")] = Accounting.TIGHT,
    warn: Annotated[
        float | None,
        typer.Option(
            "--warn",
            help="Flag the budget at this percent spent, in (0, 100] (default: unchanged; "
            "80 for a new budget), as the dashboard's 'Warn at (% of ε)'.",
        ),
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set or change a dataset's total privacy budget."""
    body: dict[str, Any] = {"epsilon": epsilon, "accounting": accounting.value}
    if delta is not None:
        body["delta"] = delta
    if warn is not None:
        try:
            body["warn_threshold"] = warn_fraction(warn)
        except ValueError as err:
            exit_with(ClientError(f"--warn is {err}", code=2))
    budget = request(url, key, "PUT", f"/v1/datasets/{dataset}/budget", json=body)
    if as_json:
        print_json(budget)
    else:
        _print_budget(budget, history=False)


@budget_app.command("show")
def budget_show(
    dataset: DatasetIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A dataset's budget, what was spent, and its ledger history."""
    budget = request(url, key, "GET", f"/v1/datasets/{dataset}/budget")
    if as_json:
        print_json(budget)
    else:
        _print_budget(budget, history=True)


@budget_app.command("list")
def budget_list(
    over_threshold: Annotated[
        bool,
        typer.Option("--over-threshold", help="Only budgets at or past their warn threshold."),
    ] = False,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants", help="Every tenant's budgets (an organisation key, org:read)."
        ),
    ] = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Budgeted datasets and their spend: budget, composed spend, share used and its level."""
    params = {
        name: "true"
        for name, given in (("over_threshold", over_threshold), ("all_tenants", all_tenants))
        if given
    }
    rows = request(url, key, "GET", "/v1/budgets", params=params)
    if as_json:
        print_json(rows)
        return
    tenant = ["tenant"] if all_tenants else []
    print_rows(
        [*tenant, "dataset", "name", "budget", "spent", "count release", "used", "warn at",
         "level", "jobs"],
        [
            [
                *([row.get("tenant_name") or row.get("tenant_id", "-")] if all_tenants else []),
                row["dataset_id"],
                row["name"],
                f"{row['epsilon']:g}",
                spend_text(row["spent"]),
                _release_cell(row),
                budget_percent(row["spent_fraction"]),
                percent_text(row["warn_threshold"]),
                row["level"],
                str(row["live_jobs"]),
            ]
            for row in rows
        ],
    )  # fmt: skip
    if any(row.get("counts_epsilon") for row in rows):  # a note, beside the table
        err.print(
            "count release: the part of the spend that is the dataset's release of its label "
            "counts, charged once for the dataset ('dpsyn budget show DATASET')",
            markup=False,
        )


def _release_cell(row: dict[str, Any]) -> str:
    """The count release's part of a budget's spend ("-": none, or an older server)."""
    counts = row.get("counts_epsilon")
    return spend_text(counts) if counts else "-"


@budget_app.command("ledger")
def budget_ledger(
    dataset: Annotated[
        str | None, typer.Argument(help="The dataset (not with --all-tenants).")
    ] = None,
    csv: Annotated[
        bool,
        typer.Option("--csv", help="The ledger as CSV (the dashboard's export) on stdout."),
    ] = False,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants",
            help="Every tenant's ledgers as one CSV (an organisation key, org:read).",
        ),
    ] = False,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="With --all-tenants: one tenant's only (ID or name)."),
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A dataset's ledger: every reserve, commit and release, and its count release
    (kind counts, charged once), oldest first; with --all-tenants, every tenant's (or one
    team's, --tenant) as the fleet CSV, for a privacy officer's org key."""
    if all_tenants or tenant is not None:
        _fleet_ledgers(dataset, tenant, url, key)
        return
    if dataset is None:
        exit_with(ClientError("give a dataset ID (or --all-tenants with an org key)", code=2))
    try:
        with Api(url, key) as api:
            if csv:
                response = api.download(f"/v1/datasets/{dataset}/budget/ledger.csv")
                typer.get_binary_stream("stdout").write(response.content)  # as served: CRLF
                return
            budget = api.call("GET", f"/v1/datasets/{dataset}/budget")
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(budget["history"])
    elif budget["history"]:
        _print_ledger(budget["history"])
    else:
        typer.echo(f"the ledger of dataset {dataset} is empty: no job was charged yet")


def _fleet_ledgers(
    dataset: str | None, tenant: str | None, url: str | None, key: str | None
) -> None:
    """``budget ledger --all-tenants``: the fleet CSV on stdout, as served."""
    if dataset is not None:
        exit_with(ClientError("--all-tenants reads every dataset: give no dataset ID", code=2))
    try:
        with Api(url, key) as api:
            params = {"tenant": tenant} if tenant is not None else None
            response = api.download("/v1/fleet/ledgers.csv", params=params)
    except ClientError as error:
        exit_with(error)
    typer.get_binary_stream("stdout").write(response.content)


# --- jobs -----------------------------------------------------------------------------------

jobs_app = typer.Typer(help="Synthesis jobs.", no_args_is_help=True)


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
        f"{job['epsilon']:.4g}{_asked(job)} at delta {job['delta']:.3g}, dataset "
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
        charged = job.get("charged_epsilon")
        cost = f"charged epsilon {charged:.4g}: " if job["status"] in _ENDED_WITHOUT_PROMPT else ""
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


def _job_fields(
    dataset: str,
    epsilon: float,
    method: str | None,
    shots: int | None,
    delta: float | None,
    accounting: Accounting | None,
) -> dict[str, Any]:
    """The job's own fields (None: the server's default); a bad ``--epsilon`` stops here."""
    if not is_epsilon(epsilon):
        raise ClientError(f"--epsilon must be a positive number, got {epsilon:g}", code=2)
    return {
        "dataset_id": dataset,
        "method": method,
        "epsilon": epsilon,
        "shots": shots,
        "delta": delta,
        "accounting": accounting.value if accounting is not None else None,
    }


def _job_body(fields: dict[str, Any], params: list[str] | None, extra: list[str]) -> dict[str, Any]:
    """The ``POST /v1/jobs`` body: the fields given (None: the server's default) and the
    method parameters (``--NAME VALUE`` and ``--param NAME=VALUE``)."""
    body = {name: value for name, value in fields.items() if value is not None}
    given = {**_flag_params(extra), **_parse_params(params or [])}
    if given:
        body["params"] = given
    return body


def _show_submitted(
    job: dict[str, Any],
    validation: dict[str, Any] | None,
    *,
    wait: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """What ``jobs submit`` prints once the job is submitted (and waited for, with its
    prompt's ``validation`` when the job named a validation set; ``--json`` prints the job
    as the API answers it, and ``prompts get --json`` has the score)."""
    if as_json:
        print_json(job)
    elif quiet:
        typer.echo(job["prompt_id"] if wait and job.get("prompt_id") else job["id"])
    elif wait:
        out.print(_describe_job(job), markup=False)
        if validation:
            out.print(validation_line(validation), markup=False)
        if job.get("prompt_id"):
            out.print(f"see it with: dpsyn prompts get {job['prompt_id']}", markup=False)
    if wait and job["status"] != "succeeded":
        if quiet or as_json:
            err.print(f"error: {_describe_job(job)}", markup=False)
        raise typer.Exit(code=1)


def _print_spend(api: Api, dataset: str) -> None:
    """The dataset's spend with this job reserved, composed and as a plain sum: why jobs whose
    epsilons add up to more than the budget were all admitted (they compose; and one that
    charges other label groups than the binding one adds nothing)."""
    try:
        budget = api.call("GET", f"/v1/datasets/{dataset}/budget")
    except ClientError:  # only a hint: the job is submitted either way
        return
    spent, total, plain = budget["spent"], budget["epsilon"], budget["plain_sum"]
    line = (
        f"dataset spend now {spend_text(spent)} of {total:g} "
        f"({budget_percent(spent / total)}), composed over {budget['live_jobs']} job(s)"
    )
    if plain > spent * (1 + 1e-9):
        line += (
            f"; their epsilons sum to {spend_text(plain)}, but composed privacy loss grows "
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


VALIDATION_DATASET = typer.Option(
    "--validation-dataset",
    help="ID of a public labelled dataset (upload --public --labelled): the stored prompt is "
    "scored on it; no privacy cost.",
)


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


@jobs_app.command(
    "submit", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
def jobs_submit(
    ctx: typer.Context,
    dataset: DatasetOpt,
    epsilon: EpsilonOpt,
    method: MethodOpt = None,
    public_dataset: PublicDatasetOpt = None,
    validation_dataset: Annotated[str | None, VALIDATION_DATASET] = None,
    shots: ShotsOpt = None,
    delta: DeltaOpt = None,
    accounting: AccountingOpt = None,
    param: ParamOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job, with progress.")] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between polls.")] = 1.0,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the job ID (with --wait: prompt ID).")
    ] = False,
) -> None:
    """Submit a synthesis job; its cost is reserved against the dataset's budget.

    Any method parameter goes as --NAME VALUE (--M 4, --max-public 40) or --param NAME=VALUE;
    the server refuses one its method does not take, naming the methods that do. A method
    that reads public texts also needs --public-dataset (uploaded with 'dpsyn datasets upload
    --public'); they are never charged."""
    try:
        fields = _job_fields(dataset, epsilon, method, shots, delta, accounting)
        fields.update(public_dataset_id=public_dataset, validation_dataset_id=validation_dataset)
        body = _job_body(fields, param, list(ctx.args))
        with Api(url, key) as api:
            job = api.call("POST", "/v1/jobs", json=body)
            if not quiet and not as_json:
                out.print(_describe_job(job), markup=False)
                if job.get("settings"):
                    err.print(job["settings"], markup=False)
                    _print_coverage(api, job)
                _print_spend(api, job["dataset_id"])
            validation = None
            if wait:
                job, validation = _wait(api, job, interval=poll, timeout=timeout)
    except ClientError as error:
        exit_with(error)
    _show_submitted(job, validation, wait=wait, quiet=quiet, as_json=as_json)


@jobs_app.command(
    "quote", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
def jobs_quote(
    ctx: typer.Context,
    dataset: DatasetOpt,
    epsilon: EpsilonOpt,
    method: MethodOpt = None,
    public_dataset: PublicDatasetOpt = None,
    shots: ShotsOpt = None,
    delta: DeltaOpt = None,
    accounting: AccountingOpt = None,
    param: ParamOpt = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What a job would cost, before it is submitted (the dashboard's "Check the cost"):
    planned and checked as 'jobs submit' plans it, nothing reserved, with each label's noise
    multiplier. The dataset's spend is composed, so a job may add less than its own epsilon
    to it, or nothing.

    The same request plans the same job (the same epsilon, noise and labels) in every quote
    and in its submission; another job admitted meanwhile changes the spend. The first plan
    of a dataset whose counts are not declared public draws its count release, charged once
    to the budget (the quote's spend includes it)."""
    try:
        fields = _job_fields(dataset, epsilon, method, shots, delta, accounting)
        fields["public_dataset_id"] = public_dataset
        body = _job_body(fields, param, list(ctx.args))
        quote = request(url, key, "POST", "/v1/jobs/quote", json=body)
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(quote)
    else:
        print_quote(quote)


def print_quote(quote: dict[str, Any]) -> None:
    """The quote in words: the job's epsilon, the dataset's composed spend before and after
    (and the plain sum, which composition beats), whether it fits, and per label group."""
    budget = quote["budget"]
    after = quote["spent_after"]
    typer.echo(
        f"this job: epsilon {quote['epsilon']:.4g} at delta {quote['delta']:.3g} (reserved "
        "when submitted)"
    )
    typer.echo(
        f"dataset {quote['dataset_id']}: spent {spend_text(quote['spent'])} of {budget:g} now, "
        f"{spend_text(after)} ({budget_percent(after / budget)}) if admitted; a plain sum "
        f"would say {spend_text(quote['plain_sum_after'])}"
    )
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
    typer.echo(
        "per label group (the dataset's spend is the largest group's; a job that charges "
        "only other groups adds nothing to it):"
    )
    print_rows(
        ["labels", "before", "after", "charged", "sets the spend"],
        [
            [
                ", ".join(group["labels"]) or "(all records)",
                spend_text(group["before"]),
                spend_text(group["after"]),
                "yes" if group["charged"] else "",
                _binding_change(group["binding_before"], group["binding_after"]),
            ]
            for group in groups
        ],
    )


def _binding_change(before: bool, after: bool) -> str:
    if before and after:
        return "yes"
    if after:
        return "after the job"
    return "before the job" if before else ""


def _print_job(job: dict[str, Any], as_json: bool) -> None:
    """The server's JSON, or the one-line description of a job."""
    if as_json:
        print_json(job)
    else:
        out.print(_describe_job(job), markup=False)


# What a job's ``counts`` field says, in words.
JOB_COUNTS = {
    "released": "planned with the dataset's count release (released once under DP, charged "
    "once to its budget: 'dpsyn budget show')",
    "declared_public": "declared public by the dataset's owner: planned with the exact counts, "
    "none released",
}


@jobs_app.command("show")
def jobs_show(
    job_id: JobIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A job's status, progress, cost and result, and the key that submitted it."""
    job = request(url, key, "GET", f"/v1/jobs/{job_id}")
    _print_job(job, as_json)
    if not as_json:
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
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the prompt ID.")] = False,
) -> None:
    """Wait for a job submitted earlier, with progress, as 'jobs submit --wait' does (and
    for its validation score if it named a validation set); exit 1 unless it succeeded."""
    try:
        with Api(url, key) as api:
            job = api.call("GET", f"/v1/jobs/{job_id}")
            job, validation = _wait(api, job, interval=poll, timeout=timeout)
    except ClientError as error:
        exit_with(error)
    _show_submitted(job, validation, wait=True, quiet=quiet, as_json=as_json)


@jobs_app.command("cancel")
def jobs_cancel(
    job_id: JobIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job (a running one stops at its next step); says what it is charged and why."""
    _print_job(request(url, key, "POST", f"/v1/jobs/{job_id}/cancel"), as_json)


def _asked(job: dict[str, Any]) -> str:
    """ " (2 asked)" beside a planned epsilon that differs from the one asked (newer servers
    say it); "" otherwise."""
    asked = job.get("epsilon_asked")
    if asked is None or f"{asked:.4g}" == f"{job['epsilon']:.4g}":
        return ""
    return f" ({asked:g} asked)"


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
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your jobs, newest first: status, method, epsilon, dataset and prompt."""
    params = _page(limit, offset, dataset_id=dataset, status=status.value if status else None)
    rows = request(url, key, "GET", "/v1/jobs", params=params)
    if as_json:
        print_json(rows)
        return
    charged = any("charged_epsilon" in row for row in rows)
    print_rows(
        ["id", "status", "method", "epsilon", *(["charged"] if charged else []), "dataset",
         "prompt", "created"],
        [
            [
                row["id"],
                row["status"],
                row["method"],
                f"{row['epsilon']:.4g}",
                *([_charged(row)] if charged else []),
                _dataset_cell(row),
                row.get("prompt_id") or "-",
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )  # fmt: skip


# --- prompts --------------------------------------------------------------------------------

prompts_app = typer.Typer(help="Synthesised prompts (DP outputs).", no_args_is_help=True)


def validation_line(validation: dict[str, Any]) -> str:
    """The prompt's score on its job's validation set, in one line (as the server says it)."""
    where = f"public dataset {validation['dataset_id']}; no privacy cost"
    if validation["status"] == "scored":
        line = (
            f"validation: accuracy {validation['accuracy']:.3f} on {validation['n']} records "
            f"of {where}"
        )
        base = validation.get("baselines")
        if not base:
            return line
        majority = (
            f", majority label {base['majority_label']!r} {base['majority']:.3f}"
            if base.get("majority") is not None
            else ""
        )
        line += f"\nbaselines: zero-shot {base['zero_shot']:.3f}{majority}"
        if validation.get("verdict"):
            line += f"\nthis prompt {validation['verdict']}"
        if validation.get("calibrated_verdict"):
            line += (
                f"\ncalibrated (prompts complete --calibrated): accuracy "
                f"{validation['calibrated_accuracy']:.3f}, zero-shot "
                f"{base['zero_shot_calibrated']:.3f}; "
                f"this prompt {validation['calibrated_verdict']}"
            )
        return line
    if validation["status"] == "pending":
        return f"validation: pending, scored once the worker gets to it ({where})"
    return f"validation: not scored: {one_line(validation.get('reason') or '')} ({where})"


class PromptOutput(StrEnum):
    """What ``dpsyn prompts get`` prints: the prompt, or its chat messages (JSON)."""

    TEXT = "text"
    MESSAGES = "messages"


@prompts_app.command("get")
def prompts_get(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID (a job's prompt_id).")],
    output: Annotated[
        PromptOutput,
        typer.Option(
            "--format",
            help="text: the demonstrations, cost and prompt text; messages: the prompt as "
            "chat messages (JSON), as OpenAI-compatible chat APIs take them.",
        ),
    ] = PromptOutput.TEXT,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a synthesised prompt and its privacy cost, or its chat messages."""
    with prompt_client(url, key) as client:
        fetched = client.get_prompt(prompt_id)
        if output is PromptOutput.MESSAGES:
            print_json(fetched.messages())
            return
    prompt = fetched.data
    if as_json:
        print_json(prompt)
        return
    spec = prompt["task_spec"]
    for number, demo in enumerate(prompt["demonstrations"], 1):
        typer.echo(f"[{number}] {spec.get('label_field', 'Label')}: {demo['label']}")
        typer.echo(f"    {spec.get('text_field', 'Text')}: {demo['text']}")
    typer.echo(
        f"prompt {prompt['id']} (task {prompt['task']}, {prompt['method']}, model "
        f"{prompt['model']}): epsilon {prompt['epsilon']:.4g} at delta {prompt['delta']:.3g}"
    )
    for note in fetched.notes:
        typer.echo(f"note: {note}")
    if prompt.get("validation"):
        typer.echo(validation_line(prompt["validation"]))
    soft = prompt.get("soft_prompt")
    if soft:
        typer.echo(
            f"soft prompt: {soft['length']} x {soft['hidden']} embeddings for model "
            f"{soft['model']}, sha256 {soft['sha256']}"
        )
        typer.echo(f"download it with: dpsyn prompts download {prompt['id']}")
    if prompt["prompt"].strip():
        typer.echo("--- prompt ---")
        typer.echo(prompt["prompt"])
    elif soft:  # its demonstrations are trained vectors, not text: nothing to print
        typer.echo(
            f"(no text prompt: this is a soft prompt, {soft['length']} trained vectors the "
            f"model reads before each input; use it with 'dpsyn prompts complete "
            f"{prompt['id']} --query TEXT', or download it as above for model {soft['model']})"
        )


@prompts_app.command("download")
def prompts_download(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID (of a promptdpsgd job).")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write (default: ./<prompt id>.safetensors)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
) -> None:
    """Download a prompt's soft prompt (promptdpsgd) as a safetensors file.

    The file's SHA-256 is checked against the one the server stored before anything is
    written; an existing file is kept unless --force."""
    path = output or Path(f"{prompt_id}.safetensors")
    if path.exists() and not force:
        exit_with(ClientError(f"{path} exists; pass --force to overwrite it", code=2))
    try:
        with Api(url, key) as api:
            response = api.download(f"/v1/prompts/{prompt_id}/soft-prompt")
    except ClientError as error:
        exit_with(error)
    data = response.content
    expected = response.headers.get("x-content-sha256")
    digest = hashlib.sha256(data).hexdigest()
    if expected is None or digest != expected:
        exit_with(
            ClientError(
                f"the download does not match its SHA-256 ({expected or 'none sent'}); "
                "nothing was written, try again"
            )
        )
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(data)
        partial.replace(path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        exit_with(ClientError(f"cannot write {path}: {error.strerror or error}", code=2))
    typer.echo(f"wrote {path} ({len(data)} bytes, sha256 {digest})")


@prompts_app.command("complete")
def prompts_complete(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID.")],
    query: Annotated[str, typer.Option("--query", help="The input to classify or extract from.")],
    calibrated: Annotated[
        bool,
        typer.Option(
            "--calibrated",
            help="Classification: contextual calibration of the label scores (no privacy cost).",
        ),
    ] = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a query with a synthesised prompt (in-context learning on the server's model)."""
    with prompt_client(url, key) as client:
        answer = client.complete(prompt_id, query, calibrated=calibrated)
    if as_json:
        print_json(answer)
        return
    if answer.get("label") is not None:
        how = " (calibrated)" if answer.get("calibration") == "contextual" else ""
        typer.echo(f"label: {answer['label']}{how}")
        scores = answer.get("scores") or {}
        for label, score in sorted(scores.items(), key=lambda item: -item[1]):
            typer.echo(f"  {label}: {score:.3f}")
    else:
        typer.echo(f"value: {answer.get('value')}")


class PromptSort(StrEnum):
    """How ``prompts list`` orders its page."""

    CREATED = "created"
    VALIDATION = "validation"


@prompts_app.command("list")
def prompts_list(
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Only prompts of this dataset (ID or name).")
    ] = None,
    limit: LimitOpt = 100,
    offset: OffsetOpt = 0,
    sort: Annotated[
        PromptSort,
        typer.Option("--sort", help="created: newest first; validation: best score first."),
    ] = PromptSort.CREATED,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your prompts, newest first: method, dataset (name and ID), task, epsilon, validation
    score (marked when it does not beat zero-shot), job."""
    rows = request(url, key, "GET", "/v1/prompts", params=_page(limit, offset, dataset_id=dataset))
    if sort is PromptSort.VALIDATION:  # unscored last, then as listed
        rows = sorted(rows, key=lambda r: -(r.get("validation_accuracy") or -1.0))
    if as_json:
        print_json(rows)
        return
    print_rows(
        ["id", "method", "dataset", "task", "epsilon", "kind", "validation", "job", "created"],
        [
            [
                row["id"],
                row["method"],
                _dataset_cell(row),
                row["task"] or "-",
                f"{row['epsilon']:.4g}",
                "soft prompt" if row.get("soft_prompt") else "text",
                _validation_cell(row),
                row["job_id"],
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )


def _validation_cell(row: dict[str, Any]) -> str:
    """The validation accuracy, marked when it does not beat zero-shot (-: no score)."""
    accuracy = row.get("validation_accuracy")
    if accuracy is None:
        return "-"
    below = " (not above zero-shot)" if row.get("beats_zero_shot") is False else ""
    return f"{accuracy:.3f}{below}"


def _dataset_cell(row: dict[str, Any]) -> str:
    """The dataset's name and ID (the ID alone from a server that sends no name)."""
    name = row.get("dataset_name")
    return f"{name} ({row['dataset_id']})" if name else row["dataset_id"]
