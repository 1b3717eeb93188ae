"""``dpsyn datasets ...``: upload, list, show, reads, delete, counts-public."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.client.common import TABLE_SUFFIXES, DatasetIdArg
from app.cli.custom_task import (
    custom_task,
    given_flags,
    label_counts_line,
    parse_column,
    parse_pairs,
)
from app.cli.http_client import (
    ClientError,
    QuietOpt,
    Reply,
    YesOpt,
    confirm,
    err,
    exit_with,
    out,
    print_json,
    print_rows,
)
from app.cli.options import ColumnOptions, CustomTaskOptions, GroupedTyper
from app.cli.timestamps import shown_time
from app.privacy.budget import (
    budget_percent,
    spend_text,
)
from app.synthesis.data import Column

# --- datasets -------------------------------------------------------------------------------

datasets_app = GroupedTyper(
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
    task: str | None,
    custom: dict[str, str | None],
    label_map: dict[str, str] | None,
    what: str = "a private dataset",
) -> tuple[str, Any]:
    """The ``task`` form field and spec of a labelled upload, private or a validation set
    (``what``): ``--task`` (built-in or spec file) or, as in ``dpsyn synthesize``, a custom
    task from ``--labels``/``--label-map`` and friends (``--task custom`` is implied)."""
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
            f"--task is required for {what}: trec|trec14|agnews|sst2|mitg|mitd, a spec "
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
    # Without --name the server names it after the file (numbered if the name is taken).
    fields = {"public": "true", **({"name": name} if name else {})}
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
    owner = dataset.get("budget_dataset_id")
    shared = f"; charges dataset {owner}'s budget" if owner else ""
    return (
        f"dataset {dataset['id']} '{dataset['name']}': {dataset['record_count']} records, "
        f"task {task or '?'} ({counts}){declared}{shared}"
    )


def counts_line(dataset: dict[str, Any]) -> str | None:
    """What a private dataset's label counts are to its jobs, with when and by which key
    that was chosen (None: a public dataset, or a server that does not say)."""
    if dataset.get("kind") == "public" or "counts_public" not in dataset:
        return None
    at, by = dataset.get("counts_public_at"), dataset.get("counts_public_by")
    who = f" by key {by}" if by else ""
    if dataset["counts_public"]:
        when = f" ({shown_time(at)}{who})" if at else ""
        return (
            f"label counts: declared public{when}: jobs plan with the exact counts and release "
            "none; paper accounting is allowed"
        )
    withdrawn = f" (declaration withdrawn {shown_time(at)}{who})" if at else ""
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
        try:
            pairs = parse_pairs(label_map, "--label-map") if label_map else None
        except ValueError as error:
            raise ClientError(str(error), code=2) from None
        what = "a labelled public dataset" if labelled else "a private dataset"
        fields, part = _upload_parts(
            file,
            _private_task(task, custom, pairs, what),
            parse_column(text_col),
            parse_column(label_col),
            pairs,
            name,
        )
        if labelled:  # a public validation set, named (by the server) after its file
            fields.update(public="true", labelled="true")
        if counts_public:
            fields["counts_public"] = "true"
    return fields, part


LABELLED = typer.Option(
    "--labelled/--no-labelled",
    help="With --public: keep the labels (read as for a private dataset: --task, or a custom "
    "task from --labels): a validation set for 'jobs submit --validation-dataset'.",
)
BUDGET_OF = typer.Option(
    "--budget-of",
    help="Private: charge this dataset's budget (its ID or name) instead of a budget of its "
    "own; needed when some records were uploaded before (the refusal names the dataset).",
)
PUBLIC_COUNTS = typer.Option(
    "--public-counts/--no-public-counts",
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
            "--public/--no-public",
            help="Public unlabelled texts for PromptPATE jobs (text column only; never charged).",
        ),
    ] = False,
    labelled: Annotated[bool, LABELLED] = False,
    public_counts: Annotated[bool, PUBLIC_COUNTS] = False,
    budget_of: Annotated[str | None, BUDGET_OF] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Default: the task's name (the file name for --public)."),
    ] = None,
    quiet: QuietOpt = False,
    *,
    server: Reply,  # the groups' options (with_groups)
    columns: ColumnOptions,
    custom: CustomTaskOptions,
) -> None:
    """Upload a private labelled dataset, or with --public unlabelled texts, or with --public
    --labelled a public validation set (its records never come back)."""
    read = (columns.text_col, columns.label_col, columns.label_map)
    try:  # the file is read, and its problems said, before the server is asked anything
        fields, part = _dataset_parts(
            file, task, public, labelled, custom.given(), read, name, public_counts
        )
    except ClientError as error:
        exit_with(error)
    if budget_of:
        fields["budget_of"] = budget_of
    dataset = server.request("POST", "/v1/datasets", data=fields, files={"file": part})
    if quiet and not server.as_json:
        typer.echo(dataset["id"])
    else:
        server.show(dataset, lambda shown: out.print(describe_dataset(shown), markup=False))
    for warning in dataset.get("warnings") or ():  # on stderr, --json and --quiet too
        err.print(f"warning: {warning}", markup=False)


@datasets_app.command("list")
def datasets_list(
    include_deleted: Annotated[
        bool,
        typer.Option(
            "--include-deleted/--no-include-deleted",
            help="Also datasets whose records were deleted.",
        ),
    ] = False,
    *,
    server: Reply,
) -> None:
    """List your datasets, with each private one's spend against its budget."""
    params = {"include_deleted": "true"} if include_deleted else {}
    with server.session() as api:
        rows = api.call("GET", "/v1/datasets", params=params)
        budgets = [] if server.as_json else api.call("GET", "/v1/budgets")
    server.show(rows, partial(_print_datasets, budgets=budgets))


def _print_datasets(rows: list[dict[str, Any]], budgets: list[dict[str, Any]]) -> None:
    """``datasets list``'s table, with each private dataset's spend from ``budgets``."""
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
                shown_time(row["created_at"]),
            ]
            for row in rows
        ],
    )


def _spend_cell(budget: dict[str, Any]) -> str:
    """``1.25/10 (12%, ok)``: composed spend of the budget, its share, its level."""
    share = budget_percent(budget["spent_fraction"])
    total = spend_text(budget["epsilon"])
    return f"{spend_text(budget['spent'])}/{total} ({share}, {budget['level']})"


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
        typer.Option(
            "--withdraw/--no-withdraw", help="Make the counts private again (jobs release them)."
        ),
    ] = False,
    yes: YesOpt = False,
    *,
    server: Reply,
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
    dataset = server.request("PUT", path, json={"public": not withdraw})
    server.show(dataset, print_dataset)


@datasets_app.command("show")
def datasets_show(dataset_id: DatasetIdArg, server: Reply) -> None:
    """A dataset's metadata: name, kind, task, records per label (never a record)."""
    dataset = server.request("GET", f"/v1/datasets/{dataset_id}")
    server.show(dataset, _print_dataset_dates)


def _print_dataset_dates(dataset: dict[str, Any]) -> None:
    """``datasets show``: :func:`print_dataset`, and when it was created and deleted."""
    print_dataset(dataset)
    for warning in dataset.get("warnings") or ():
        typer.echo(f"warning: {warning}")
    typer.echo(f"created {shown_time(dataset['created_at'])}")
    if dataset.get("deleted_at"):
        typer.echo(f"records deleted {shown_time(dataset['deleted_at'])} (its ledger stays)")
    if dataset.get("records_dropped_at"):
        typer.echo(
            f"records dropped {shown_time(dataset['records_dropped_at'])} by the retention setting "
            "(its budget, ledger and prompts stay)"
        )


@datasets_app.command("reads")
def datasets_reads(
    dataset_id: DatasetIdArg,
    limit: Annotated[int, typer.Option(help="At most this many, the latest first.")] = 100,
    *,
    server: Reply,
) -> None:
    """Who read a dataset's records: each job, advice run or validation that read them, the
    process (host:pid) and when; never a record. Beside its ledger (dpsyn budget show)."""
    rows = server.request("GET", f"/v1/datasets/{dataset_id}/reads", params={"limit": limit})
    server.show(rows, _print_reads)


def _print_reads(rows: list[dict[str, Any]]) -> None:
    if not rows:
        typer.echo("no read of its records is recorded")
        return
    print_rows(
        ["time", "reader", "id", "process", "records"],
        [
            [
                shown_time(r["read_at"]),
                r["reader_kind"],
                r["reader_id"],
                r["process"],
                str(r["record_count"]),
            ]
            for r in rows
        ],
    )


@datasets_app.command("delete")
def datasets_delete(dataset_id: DatasetIdArg, yes: YesOpt = False, *, server: Reply) -> None:
    """Delete a dataset's records for good. Its queued jobs are cancelled (a running one must
    be cancelled first); the dataset's row, budget ledger and prompts stay."""
    with server.session() as api:
        dataset = api.call("GET", f"/v1/datasets/{dataset_id}")
        deleted = None
        if not dataset.get("deleted_at"):
            confirm(
                f"Delete the {dataset['record_count']} records of dataset {dataset_id} "
                f"'{dataset['name']}'? Its ledger and prompts stay; this cannot be undone.",
                yes,
            )
            deleted = api.call("DELETE", f"/v1/datasets/{dataset_id}")
    if server.as_json:
        print_json(deleted or dataset)
    elif deleted is None:
        typer.echo(f"dataset {dataset_id}'s records were already deleted; nothing changed")
    else:
        typer.echo(f"deleted the records of dataset {dataset_id} '{deleted['name']}'")
