"""``dpsyn prompts ...``: get, download, complete, list (through the downstream client,
:mod:`dpsyn_client.client`, so the CLI exercises what an app uses)."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.client.common import LimitOpt, OffsetOpt, _page
from app.cli.http_client import (
    ClientError,
    Reply,
    Server,
    exit_with,
    one_line,
    print_json,
    print_rows,
)
from app.cli.options import GroupedTyper
from app.cli.timestamps import shown_time
from app.eval.verdict import Outcome
from app.privacy.display import delta_text, epsilon_text

# --- prompts --------------------------------------------------------------------------------

prompts_app = GroupedTyper(help="Synthesised prompts (DP outputs).", no_args_is_help=True)


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
    *,
    server: Reply,
) -> None:
    """Print a synthesised prompt and its privacy cost, or its chat messages."""
    with server.prompt_client() as client:
        fetched = client.get_prompt(prompt_id)
        if output is PromptOutput.MESSAGES:  # in the block: a prompt with no chat form fails
            print_json(fetched.messages())
            return
    server.show(fetched.data, partial(_print_prompt, notes=fetched.notes))


def _print_prompt(prompt: dict[str, Any], notes: list[str]) -> None:
    """``prompts get``: the demonstrations, the cost, the server's notes, the validation
    score, the soft prompt and the prompt's text."""
    spec = prompt["task_spec"]
    for number, demo in enumerate(prompt["demonstrations"], 1):
        typer.echo(f"[{number}] {spec.get('label_field', 'Label')}: {demo['label']}")
        typer.echo(f"    {spec.get('text_field', 'Text')}: {demo['text']}")
    typer.echo(
        f"prompt {prompt['id']} (task {prompt['task']}, {prompt['method']}, model "
        f"{prompt['model']}): epsilon {epsilon_text(prompt['epsilon'])} at delta "
        f"{delta_text(prompt['delta'])}"
    )
    for note in notes:
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
    force: Annotated[
        bool, typer.Option("--force/--no-force", help="Overwrite an existing file.")
    ] = False,
    *,
    server: Server,
) -> None:
    """Download a prompt's soft prompt (promptdpsgd) as a safetensors file.

    The file's SHA-256 is checked against the one the server stored before anything is
    written; an existing file is kept unless --force."""
    path = output or Path(f"{prompt_id}.safetensors")
    if path.exists() and not force:
        exit_with(ClientError(f"{path} exists; pass --force to overwrite it", code=2))
    with server.session() as api:
        response = api.download(f"/v1/prompts/{prompt_id}/soft-prompt")
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
    unfinished = path.with_name(path.name + ".partial")
    try:
        unfinished.write_bytes(data)
        unfinished.replace(path)
    except OSError as error:
        unfinished.unlink(missing_ok=True)
        exit_with(ClientError(f"cannot write {path}: {error.strerror or error}", code=2))
    typer.echo(f"wrote {path} ({len(data)} bytes, sha256 {digest})")


@prompts_app.command("complete")
def prompts_complete(
    prompt_id: Annotated[str, typer.Argument(help="Prompt ID.")],
    query: Annotated[str, typer.Option("--query", help="The input to classify or extract from.")],
    calibrated: Annotated[
        bool,
        typer.Option(
            "--calibrated/--no-calibrated",
            help="Classification: contextual calibration of the label scores (no privacy cost).",
        ),
    ] = False,
    *,
    server: Reply,
) -> None:
    """Answer a query with a synthesised prompt (in-context learning on the server's model)."""
    with server.prompt_client() as client:
        answer = client.complete(prompt_id, query, calibrated=calibrated)
    server.show(answer, _print_answer)


def _print_answer(answer: dict[str, Any]) -> None:
    """A completion: the label and its scores, or the extracted value."""
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
    *,
    server: Reply,
) -> None:
    """Your prompts, newest first: method, dataset (name and ID), task, epsilon, validation
    score (each marked ahead, behind or cannot tell: its verdict against the better of
    zero-shot and the majority label, at two standard errors, about 95%), job."""
    rows = server.request("GET", "/v1/prompts", params=_page(limit, offset, dataset_id=dataset))
    if sort is PromptSort.VALIDATION:  # unscored last, then as listed
        rows = sorted(rows, key=lambda r: -(r.get("validation_accuracy") or -1.0))
    server.show(rows, _print_prompts)


def _print_prompts(rows: list[dict[str, Any]]) -> None:
    """``prompts list``'s table."""
    print_rows(
        ["id", "method", "dataset", "task", "epsilon", "kind", "validation", "job", "created"],
        [
            [
                row["id"],
                row["method"],
                _dataset_cell(row),
                row["task"] or "-",
                epsilon_text(row["epsilon"]),
                "soft prompt" if row.get("soft_prompt") else "text",
                _validation_cell(row),
                row["job_id"],
                shown_time(row["created_at"]),
            ]
            for row in rows
        ],
    )


def _validation_cell(row: dict[str, Any]) -> str:
    """The validation accuracy and its verdict's outcome, the one the prompt's verdict line
    states (-: no score; unmarked: no baselines, or a server that sends no outcome)."""
    accuracy = row.get("validation_accuracy")
    if accuracy is None:
        return "-"
    outcome = row.get("validation_outcome")
    return f"{accuracy:.3f} {Outcome(outcome).words}" if outcome else f"{accuracy:.3f}"


def _dataset_cell(row: dict[str, Any]) -> str:
    """The dataset's name and ID (the ID alone from a server that sends no name)."""
    name = row.get("dataset_name")
    return f"{name} ({row['dataset_id']})" if name else row["dataset_id"]
