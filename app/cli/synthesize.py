"""``dpsyn synthesize``: private dataset in, DP synthetic demonstrations out."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.errors import err, fail, reported_errors
from app.llm.factory import BackendKind, make_backend
from app.privacy.accounting import Accounting
from app.privacy.params import Method
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import load_dataset
from app.synthesis.generator import synthesize
from app.synthesis.tasks import TaskKind, TaskSpec, get_task


def _parse_epsilon(text: str) -> float:
    value = float(text)  # accepts "inf"
    if math.isnan(value) or value <= 0:
        raise fail(
            f"--epsilon must be > 0 (or inf for the no-noise baseline), got {text}; "
            "for the epsilon = 0 baseline use --instruction-only"
        )
    return value


def _custom_task(
    labels: str | None, instruction: str | None, text_field: str, label_field: str
) -> TaskSpec:
    if not labels:
        raise fail("--task custom needs --spec FILE or --labels a,b,...")
    names = [x.strip() for x in labels.split(",") if x.strip()]
    return TaskSpec(
        name="custom",
        kind=TaskKind.CLASSIFICATION,
        instruction=instruction or f"Given a {label_field.lower()}, write a text of that kind.",
        icl_instruction=f"Classify each text by its {label_field.lower()}.",
        text_field=text_field,
        label_field=label_field,
        labels=tuple(names),
    )


def synthesize_command(
    data: Annotated[Path, typer.Option("--data", help="Private dataset file.")],
    task: Annotated[
        str, typer.Option("--task", help="trec|agnews|sst2|mitg|mitd|custom, or a spec file.")
    ],
    epsilon: Annotated[
        str, typer.Option("--epsilon", help="Privacy budget (> 0, or inf: no noise).")
    ] = "4",
    method: Annotated[Method, typer.Option("--method")] = Method.ADADPSYN,
    instruction_only: Annotated[
        bool, typer.Option("--instruction-only", help="epsilon = 0 baseline: no private data.")
    ] = False,
    delta: Annotated[float | None, typer.Option("--delta", help="Default 1/|D|.")] = None,
    accounting: Annotated[Accounting, typer.Option("--accounting")] = Accounting.TIGHT,
    shots: Annotated[int, typer.Option("--shots")] = 4,
    M: Annotated[int | None, typer.Option("--M")] = None,
    N: Annotated[int | None, typer.Option("--N")] = None,
    tmax: Annotated[int | None, typer.Option("--tmax")] = None,
    K: Annotated[int, typer.Option("--K", help="Public vocabulary size.")] = 100,
    backend: Annotated[BackendKind, typer.Option("--backend")] = BackendKind.TRANSFORMERS,
    model: Annotated[
        str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="vLLM server URL.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Testing only: a known seed voids privacy.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the result as JSON.")] = None,
    text_col: Annotated[str | None, typer.Option("--text-col")] = None,
    label_col: Annotated[str | None, typer.Option("--label-col")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="Custom task spec file.")] = None,
    labels: Annotated[str | None, typer.Option("--labels", help="Custom task labels.")] = None,
    instruction: Annotated[str | None, typer.Option("--instruction")] = None,
    text_field: Annotated[str, typer.Option("--text-field")] = "Text",
    label_field: Annotated[str, typer.Option("--label-field")] = "Label",
    candidates: Annotated[
        str | None, typer.Option("--candidates", help="Extraction: public slot values, a,b,...")
    ] = None,
) -> None:
    """Generate DP synthetic demonstrations from a private dataset."""
    with reported_errors():
        target = 0.0 if instruction_only else _parse_epsilon(epsilon)
        if task == "custom":
            spec_task = (
                get_task(spec)
                if spec
                else _custom_task(labels, instruction, text_field, label_field)
            )
        else:
            spec_task = get_task(task)
        if candidates:
            spec_task = spec_task.with_candidates([c.strip() for c in candidates.split(",")])
        records = load_dataset(spec_task, data, text_col=text_col, label_col=label_col)
        config = SynthesisConfig.for_task(
            spec_task.name,
            method=method,
            epsilon=target,
            delta=delta,
            accounting=accounting,
            shots=shots,
            M=M,
            N=N,
            tmax=tmax,
            K=K,
            seed=seed,
        )
        llm = make_backend(backend, model=model, url=url)
        with Progress(
            TextColumn("synthesising"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("tokens"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            job = bar.add_task("tokens", total=None)
            result = synthesize(
                spec_task,
                records,
                config,
                llm,
                progress=lambda done, total: bar.update(job, completed=done, total=total),
            )

    for number, demo in enumerate(result.demonstrations, 1):
        typer.echo(f"[{number}] {spec_task.label_field}: {demo.label}")
        typer.echo(f"    {spec_task.text_field}: {demo.text}")
    typer.echo(
        f"epsilon = {result.epsilon:.4g} at delta = {result.delta:.3g} "
        f"({result.method}, {config.accounting.value} accounting, model {result.model})"
    )
    if out is not None:
        out.write_text(json.dumps(result.to_dict(), indent=2))
        typer.echo(f"wrote {out}")
