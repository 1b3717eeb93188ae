"""Client commands of a running dpsyn server: ``dpsyn datasets|budget|jobs|prompts ...``.

Every command takes ``--url`` (``DPSYN_URL``) and ``--key`` (``DPSYN_API_KEY``); without them
the URL and key ``dpsyn serve`` saved in ``./.dpsyn/`` are used, else the user's config
(``~/.config/dpsyn/config.toml``, ``dpsyn config set``), else http://127.0.0.1:8000
(:mod:`app.cli.config`).
A server error is printed as its JSON error message on one line, and the command exits with
status 1 (2 for a usage or local file problem). ``--json`` prints the server's JSON instead
of text; ``-q`` prints only the ID of what was created.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console

from app.cli.config import ConfigError, resolve, user_config_path
from app.cli.custom_task import custom_task, parse_column, parse_pairs
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
from app.db.models import TERMINAL_STATUSES
from app.privacy.accounting import Accounting
from app.privacy.budget import is_epsilon
from app.synthesis.config import DEFAULT_SHOTS
from app.synthesis.data import Column

TABLE_SUFFIXES = {".csv", ".tsv", ".jsonl", ".ndjson"}

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class ClientError(Exception):
    """What to print (one line) and the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def _exit(error: ClientError) -> NoReturn:
    err.print(f"error: {error.message}", markup=False)
    raise typer.Exit(code=error.code)


def _request(url: str | None, key: str | None, method: str, path: str, **kwargs: Any) -> Any:
    """One API call; a server or connection error ends the command with its message."""
    try:
        with Api(url, key) as api:
            return api.call(method, path, **kwargs)
    except ClientError as error:
        _exit(error)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def resolve_target(url: str | None, key: str | None) -> tuple[str, str]:
    """The server URL and API key (see :mod:`app.cli.config` for the order)."""
    try:
        resolved_url, resolved_key, _ = resolve(url, key)
    except ConfigError as error:
        raise ClientError(str(error), code=2) from None
    if not resolved_key:
        raise ClientError(
            "no API key: pass --key, set DPSYN_API_KEY, run 'dpsyn serve' in this directory "
            "(it saves the admin key to ./.dpsyn/admin_key), or save one with 'dpsyn config "
            f"set --url URL --key-file FILE' ({user_config_path()})",
            code=2,
        )
    return resolved_url, resolved_key


class Api:
    """A thin JSON client; raises :class:`ClientError` with the server's message."""

    def __init__(self, url: str | None, key: str | None, *, timeout: float = 300.0) -> None:
        resolved_url, resolved_key = resolve_target(url, key)
        self.url = resolved_url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {resolved_key}"},
            timeout=timeout,
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ClientError(
                f"cannot reach the dpsyn server at {self.url} ({type(error).__name__}); "
                "is 'dpsyn serve' running? (--url / DPSYN_URL)"
            ) from None
        if response.status_code >= 400:
            raise ClientError(_server_message(response))
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def download(self, path: str) -> httpx.Response:
        """A GET whose body is a file (not JSON); errors as :meth:`call`."""
        try:
            response = self.http.get(path)
        except httpx.TransportError as error:
            raise ClientError(
                f"cannot reach the dpsyn server at {self.url} ({type(error).__name__}); "
                "is 'dpsyn serve' running? (--url / DPSYN_URL)"
            ) from None
        if response.status_code >= 400:
            raise ClientError(_server_message(response))
        return response


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body["error"]["message"]
        code = body["error"].get("code")
    except (ValueError, KeyError, TypeError):
        reason = response.reason_phrase or "error"
        return f"HTTP {response.status_code} {reason} from {response.request.url}"
    suffix = f" ({code}, HTTP {response.status_code})" if code else ""
    return _one_line(message) + suffix


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="DPSYN_URL",
        help="Server URL (default: ./.dpsyn/url, saved by 'dpsyn serve'; else the user config, "
        "'dpsyn config set'; else http://127.0.0.1:8000).",
        show_default=False,
    ),
]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="DPSYN_API_KEY",
        help="API key (default: ./.dpsyn/admin_key, saved by 'dpsyn serve'; else the user config).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the ID.")]


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def _print_rows(header: list[str], rows: list[list[str]]) -> None:
    """Aligned plain-text columns (never truncated, unlike a table fitted to the terminal)."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        typer.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


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

    given = [f"--{name.replace('_', '-')}" for name, value in custom.items() if value is not None]
    if task not in (None, "custom"):
        if given:
            raise ClientError(
                f"{', '.join(given)}: only for a custom task, not --task {task}", code=2
            )
        return _task_field(task)
    if not (given or label_map):
        raise ClientError(
            "--task is required for a private dataset: trec|agnews|sst2|mitg|mitd, a spec "
            "file, or a custom task with --labels a,b,... (or upload texts with --public)",
            code=2,
        )
    try:
        spec = custom_task(
            custom["labels"],
            label_map,
            custom["answer_words"],
            custom["instruction"],
            custom["icl_instruction"],
            custom["text_field"] or "Text",
            custom["label_field"] or "Label",
        )
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
    fields = {"task": task_value, "name": name or path.stem}
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


def _describe_dataset(dataset: dict[str, Any]) -> str:
    task = dataset["task"].get("name")
    if dataset.get("kind") == "public":
        about = f", task {task}" if task else ""
        return (
            f"dataset {dataset['id']} '{dataset['name']}' (public, never charged): "
            f"{dataset['record_count']} texts{about}"
        )
    counts = ", ".join(f"{label} {n}" for label, n in dataset["label_counts"].items())
    return (
        f"dataset {dataset['id']} '{dataset['name']}': {dataset['record_count']} records, "
        f"task {task or '?'} ({counts})"
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
    if given := [opt for opt, value in custom.items() if value is not None]:
        raise ClientError(
            f"--{given[0].replace('_', '-')}: a public dataset has no task labels", code=2
        )
    if label_map is not None:
        raise ClientError("--label-map: a public dataset has no labels", code=2)
    if isinstance(parse_column(text_col), tuple):
        raise ClientError(
            "--text-col: a public table needs a header and a column name "
            "(column numbers are for private datasets)",
            code=2,
        )


@datasets_app.command("upload")
def datasets_upload(
    file: Annotated[Path, typer.Argument(help="CSV/TSV/JSONL, or a built-in task's format.")],
    task: Annotated[
        str | None,
        typer.Option(
            "--task", help="trec|agnews|sst2|mitg|mitd or a spec (required unless --public)."
        ),
    ] = None,
    public: Annotated[
        bool,
        typer.Option(
            "--public",
            help="Public unlabelled texts for PromptPATE jobs (text column only; never charged).",
        ),
    ] = False,
    text_col: Annotated[str | None, TEXT_COL] = None,
    label_col: Annotated[str | None, LABEL_COL] = None,
    label_map: Annotated[str | None, LABEL_MAP] = None,
    labels: Annotated[str | None, LABELS] = None,
    answer_words: Annotated[str | None, ANSWER_WORDS] = None,
    instruction: Annotated[str | None, INSTRUCTION] = None,
    icl_instruction: Annotated[str | None, ICL_INSTRUCTION] = None,
    text_field: Annotated[str | None, TEXT_FIELD] = None,
    label_field: Annotated[str | None, LABEL_FIELD] = None,
    name: Annotated[str | None, typer.Option("--name", help="Default: the file name.")] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Upload a private labelled dataset, or with --public unlabelled texts (its records never
    come back)."""
    custom = {
        "labels": labels,
        "answer_words": answer_words,
        "instruction": instruction,
        "icl_instruction": icl_instruction,
        "text_field": text_field,
        "label_field": label_field,
    }
    try:
        if public:
            _check_public_options(custom, text_col, label_col, label_map)
            fields, part = _public_upload_parts(file, task, text_col, name)
        else:
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
        with Api(url, key) as api:
            dataset = api.call("POST", "/v1/datasets", data=fields, files={"file": part})
    except ClientError as error:
        _exit(error)
    if as_json:
        _print_json(dataset)
    elif quiet:
        typer.echo(dataset["id"])
    else:
        out.print(_describe_dataset(dataset), markup=False)


@datasets_app.command("list")
def datasets_list(url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False) -> None:
    """List your datasets."""
    rows = _request(url, key, "GET", "/v1/datasets")
    if as_json:
        _print_json(rows)
        return
    _print_rows(
        ["id", "name", "kind", "task", "records", "created"],
        [
            [
                row["id"],
                row["name"],
                row.get("kind", "private"),
                row["task"].get("name", "-"),
                str(row["record_count"]),
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )


# --- budget ---------------------------------------------------------------------------------

budget_app = typer.Typer(help="A dataset's privacy budget and ledger.", no_args_is_help=True)


def _print_budget(budget: dict[str, Any], *, history: bool) -> None:
    out.print(
        f"budget of dataset {budget['dataset_id']}: epsilon {budget['epsilon']:g} at delta "
        f"{budget['delta']:.3g} ({budget['accounting']} accounting); spent "
        f"{budget['spent']:.4g} (plain sum {budget['plain_sum']:.4g}) by "
        f"{budget['live_jobs']} job(s), {budget['remaining']:.4g} remaining",
        markup=False,
    )
    if history and budget["history"]:
        typer.echo("ledger:")
        _print_rows(
            ["time", "kind", "job", "epsilon", "delta"],
            [
                [
                    entry["created_at"][:19],
                    entry["kind"],
                    entry["job_id"],
                    f"{entry['epsilon']:.4g}",
                    f"{entry['delta']:.3g}",
                ]
                for entry in budget["history"]
            ],
        )


@budget_app.command("set")
def budget_set(
    dataset: Annotated[str, typer.Argument(help="Dataset ID.")],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total epsilon (> 0).")],
    delta: Annotated[float | None, typer.Option("--delta", help="Default: 1/|D|.")] = None,
    accounting: Annotated[Accounting, typer.Option("--accounting")] = Accounting.TIGHT,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set or change a dataset's total privacy budget."""
    body: dict[str, Any] = {"epsilon": epsilon, "accounting": accounting.value}
    if delta is not None:
        body["delta"] = delta
    budget = _request(url, key, "PUT", f"/v1/datasets/{dataset}/budget", json=body)
    if as_json:
        _print_json(budget)
    else:
        _print_budget(budget, history=False)


@budget_app.command("show")
def budget_show(
    dataset: Annotated[str, typer.Argument(help="Dataset ID.")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A dataset's budget, what was spent, and its ledger history."""
    budget = _request(url, key, "GET", f"/v1/datasets/{dataset}/budget")
    if as_json:
        _print_json(budget)
    else:
        _print_budget(budget, history=True)


# --- jobs -----------------------------------------------------------------------------------

jobs_app = typer.Typer(help="Synthesis jobs.", no_args_is_help=True)


def _describe_job(job: dict[str, Any]) -> str:
    """One line: status, method, cost, datasets, progress in the method's unit and what the
    server says about the finished job (all from the job's JSON: the client knows no method)."""
    progress = job["progress"]
    public = job.get("public_dataset_id")
    shots = f", {job['shots']} shots" if job["shots"] else ""  # a method may have none
    text = (
        f"job {job['id']} {job['status']}: {job['method']}{shots}, epsilon "
        f"{job['epsilon']:.4g} at delta {job['delta']:.3g}, dataset {job['dataset_id']}"
        + (f", public dataset {public}" if public else "")
        + f", progress {progress['done']}/{progress['total']} {progress.get('unit', '')}".rstrip()
    )
    if job.get("summary"):
        text += f", {job['summary']}"
    if job.get("prompt_id"):
        text += f"; prompt {job['prompt_id']}"
    if job.get("error"):
        text += f"; error: {_one_line(job['error'])}"
    return text


def _wait(api: Api, job: dict[str, Any], *, interval: float, timeout: float | None) -> dict:
    """Poll the job until it finishes, with progress on stderr (plain lines off a terminal)."""
    deadline = None if timeout is None else time.monotonic() + timeout
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


def _job_body(fields: dict[str, Any], params: list[str] | None, extra: list[str]) -> dict[str, Any]:
    """The ``POST /v1/jobs`` body: the fields given (None: the server's default) and the
    method parameters (``--NAME VALUE`` and ``--param NAME=VALUE``)."""
    body = {name: value for name, value in fields.items() if value is not None}
    given = {**_flag_params(extra), **_parse_params(params or [])}
    if given:
        body["params"] = given
    return body


def _show_submitted(job: dict[str, Any], *, wait: bool, quiet: bool, as_json: bool) -> None:
    """What ``jobs submit`` prints once the job is submitted (and waited for)."""
    if as_json:
        _print_json(job)
    elif quiet:
        typer.echo(job["prompt_id"] if wait and job.get("prompt_id") else job["id"])
    elif wait:
        out.print(_describe_job(job), markup=False)
        if job.get("prompt_id"):
            out.print(f"see it with: dpsyn prompts get {job['prompt_id']}", markup=False)
    if wait and job["status"] != "succeeded":
        if quiet or as_json:
            err.print(f"error: {_describe_job(job)}", markup=False)
        raise typer.Exit(code=1)


@jobs_app.command(
    "submit", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
def jobs_submit(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Option("--dataset", help="Private dataset ID.")],
    epsilon: Annotated[float, typer.Option("--epsilon", help="This job's epsilon (> 0).")],
    method: Annotated[
        str | None,
        typer.Option("--method", help="A method the server has (default: the server's)."),
    ] = None,
    public_dataset: Annotated[
        str | None,
        typer.Option(
            "--public-dataset", help="ID of a public dataset, for a method that reads one."
        ),
    ] = None,
    shots: Annotated[
        int, typer.Option("--shots", help="The job's shots (demonstrations, for most methods).")
    ] = DEFAULT_SHOTS,
    delta: Annotated[
        float | None, typer.Option("--delta", help="Default: the budget's delta.")
    ] = None,
    accounting: Annotated[
        Accounting | None, typer.Option("--accounting", help="Default: the budget's.")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="A method parameter as NAME=VALUE, repeatable; or give it as --NAME VALUE. "
            "The API's JobParams (GET /openapi.json) lists each method's.",
        ),
    ] = None,
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
        if not is_epsilon(epsilon):
            raise ClientError(f"--epsilon must be a positive number, got {epsilon:g}", code=2)
        fields = {
            "dataset_id": dataset,
            "method": method,
            "epsilon": epsilon,
            "shots": shots,
            "public_dataset_id": public_dataset,
            "delta": delta,
            "accounting": accounting.value if accounting is not None else None,
        }
        body = _job_body(fields, param, list(ctx.args))
        with Api(url, key) as api:
            job = api.call("POST", "/v1/jobs", json=body)
            if not quiet and not as_json:
                out.print(_describe_job(job), markup=False)
                if job.get("settings"):
                    err.print(job["settings"], markup=False)
            if wait:
                job = _wait(api, job, interval=poll, timeout=timeout)
    except ClientError as error:
        _exit(error)
    _show_submitted(job, wait=wait, quiet=quiet, as_json=as_json)


def _print_job(job: dict[str, Any], as_json: bool) -> None:
    """The server's JSON, or the one-line description of a job."""
    if as_json:
        _print_json(job)
    else:
        out.print(_describe_job(job), markup=False)


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[str, typer.Argument(help="Job ID.")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A job's status, progress, cost and result."""
    _print_job(_request(url, key, "GET", f"/v1/jobs/{job_id}"), as_json)


@jobs_app.command("cancel")
def jobs_cancel(
    job_id: Annotated[str, typer.Argument(help="Job ID.")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job (a running one stops at its next token and stays charged)."""
    _print_job(_request(url, key, "POST", f"/v1/jobs/{job_id}/cancel"), as_json)


# --- prompts --------------------------------------------------------------------------------

prompts_app = typer.Typer(help="Synthesised prompts (DP outputs).", no_args_is_help=True)


@prompts_app.command("get")
def prompts_get(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID (a job's prompt_id).")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a synthesised prompt and its privacy cost."""
    prompt = _request(url, key, "GET", f"/v1/prompts/{prompt_id}")
    if as_json:
        _print_json(prompt)
        return
    spec = prompt["task_spec"]
    for number, demo in enumerate(prompt["demonstrations"], 1):
        typer.echo(f"[{number}] {spec.get('label_field', 'Label')}: {demo['label']}")
        typer.echo(f"    {spec.get('text_field', 'Text')}: {demo['text']}")
    typer.echo(
        f"prompt {prompt['id']} (task {prompt['task']}, {prompt['method']}, model "
        f"{prompt['model']}): epsilon {prompt['epsilon']:.4g} at delta {prompt['delta']:.3g}"
    )
    soft = prompt.get("soft_prompt")
    if soft:
        typer.echo(
            f"soft prompt: {soft['length']} x {soft['hidden']} embeddings for model "
            f"{soft['model']}, sha256 {soft['sha256']}"
        )
        typer.echo(f"download it with: dpsyn prompts download {prompt['id']}")
    typer.echo("--- prompt ---")
    typer.echo(prompt["prompt"])


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
        _exit(ClientError(f"{path} exists; pass --force to overwrite it", code=2))
    try:
        with Api(url, key) as api:
            response = api.download(f"/v1/prompts/{prompt_id}/soft-prompt")
    except ClientError as error:
        _exit(error)
    data = response.content
    expected = response.headers.get("x-content-sha256")
    digest = hashlib.sha256(data).hexdigest()
    if expected is None or digest != expected:
        _exit(
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
        _exit(ClientError(f"cannot write {path}: {error.strerror or error}", code=2))
    typer.echo(f"wrote {path} ({len(data)} bytes, sha256 {digest})")


@prompts_app.command("complete")
def prompts_complete(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID.")],
    query: Annotated[str, typer.Option("--query", help="The input to classify or extract from.")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a query with a synthesised prompt (in-context learning on the server's model)."""
    answer = _request(url, key, "POST", f"/v1/prompts/{prompt_id}/complete", json={"query": query})
    if as_json:
        _print_json(answer)
        return
    if answer.get("label") is not None:
        typer.echo(f"label: {answer['label']}")
        scores = answer.get("scores") or {}
        for label, score in sorted(scores.items(), key=lambda item: -item[1]):
            typer.echo(f"  {label}: {score:.3f}")
    else:
        typer.echo(f"value: {answer.get('value')}")
