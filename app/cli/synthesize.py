"""``dpsyn synthesize``: private dataset in, DP demonstrations out.

``--method tang|adadpsyn`` synthesises texts (``app.synthesis``); ``--method promptpate``
labels public inputs with private teacher prompts (``app.pate``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.errors import err, fail, reported_errors
from app.llm.base import LLMBackend
from app.llm.factory import BackendKind, Dtype, make_backend
from app.pate.config import PateConfig
from app.pate.plan import plan_pate
from app.pate.public import read_public
from app.pate.run import run_pate
from app.privacy.accounting import Accounting
from app.privacy.params import AdaDPSynVariant, Method
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record, load_dataset
from app.synthesis.generator import SynthesisResult, synthesize
from app.synthesis.tasks import TaskKind, TaskSpec, get_task


class CliMethod(StrEnum):
    """The token-loop methods of :class:`Method`, plus PromptPATE (labels public inputs)."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"
    PROMPTPATE = "promptpate"


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
    method: Annotated[CliMethod, typer.Option("--method")] = CliMethod.ADADPSYN,
    instruction_only: Annotated[
        bool, typer.Option("--instruction-only", help="epsilon = 0 baseline: no private data.")
    ] = False,
    delta: Annotated[float | None, typer.Option("--delta", help="Default 1/|D|.")] = None,
    accounting: Annotated[Accounting, typer.Option("--accounting")] = Accounting.TIGHT,
    shots: Annotated[
        int | None, typer.Option("--shots", help="Demonstrations (tang/adadpsyn; default 4).")
    ] = None,
    M: Annotated[int | None, typer.Option("--M")] = None,
    N: Annotated[int | None, typer.Option("--N")] = None,
    tmax: Annotated[int | None, typer.Option("--tmax")] = None,
    K: Annotated[int, typer.Option("--K", help="Public vocabulary size.")] = 100,
    variant: Annotated[
        AdaDPSynVariant,
        typer.Option("--variant", help="adadpsyn: pooled (default) or paper (as published)."),
    ] = AdaDPSynVariant.POOLED,
    backend: Annotated[BackendKind, typer.Option("--backend")] = BackendKind.TRANSFORMERS,
    model: Annotated[
        str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
    ] = None,
    dtype: Annotated[
        Dtype, typer.Option("--dtype", help="Local model precision (auto: bfloat16 if native).")
    ] = Dtype.AUTO,
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
    public: Annotated[
        Path | None,
        typer.Option("--public", help="promptpate: public unlabelled inputs (.jsonl/.csv/.txt)."),
    ] = None,
    public_field: Annotated[
        str, typer.Option("--public-field", help="promptpate: JSONL field or CSV column.")
    ] = "text",
    teachers: Annotated[
        int, typer.Option("--teachers", help="promptpate: teacher prompts (ensemble size).")
    ] = 100,
    teacher_shots: Annotated[
        int, typer.Option("--teacher-shots", help="promptpate: private examples per teacher.")
    ] = 1,
    queries: Annotated[
        int, typer.Option("--queries", help="promptpate: answered queries the noise is sized for.")
    ] = 100,
    max_public: Annotated[
        int, typer.Option("--max-public", help="promptpate: public inputs processed at most.")
    ] = 1000,
    student_shots: Annotated[
        int, typer.Option("--student-shots", help="promptpate: examples in the result prompt.")
    ] = 4,
    max_chars: Annotated[
        int, typer.Option("--max-chars", help="promptpate: public inputs cut to this length.")
    ] = 600,
) -> None:
    """Generate DP demonstrations from a private dataset.

    tang/adadpsyn synthesise texts token by token; promptpate labels public inputs (--public)
    with teacher prompts built from the private data and keeps the best labelled prompt.
    """
    with reported_errors():
        if method is CliMethod.PROMPTPATE:
            _check_promptpate_options(instruction_only, public, shots, M, N, tmax)
        elif public is not None:
            raise fail("--public is only used with --method promptpate")
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
        if method is CliMethod.PROMPTPATE:
            assert public is not None
            pate_config = PateConfig(
                epsilon=target,
                delta=delta,
                accounting=accounting,
                teachers=teachers,
                shots=teacher_shots,
                queries=queries,
                max_public=max_public,
                student_shots=student_shots,
                max_chars=max_chars,
                seed=seed,
            )
            inputs = read_public(public, public_field)
            plan = plan_pate(spec_task, len(records), len(inputs), pate_config)
            llm = make_backend(backend, model=model, url=url, dtype=dtype)
            result = _with_progress(
                "labelling",
                "public inputs",
                lambda progress: run_pate(spec_task, records, inputs, plan, llm, progress=progress),
            )
            used_accounting = pate_config.accounting
        else:
            config = SynthesisConfig.for_task(
                spec_task.name,
                method=Method(method.value),
                epsilon=target,
                delta=delta,
                accounting=accounting,
                shots=shots,
                M=M,
                N=N,
                tmax=tmax,
                K=K,
                variant=variant,
                seed=seed,
            )
            llm = make_backend(backend, model=model, url=url, dtype=dtype)
            result = _synthesise(spec_task, records, config, llm)
            used_accounting = config.accounting

    for number, demo in enumerate(result.demonstrations, 1):
        typer.echo(f"[{number}] {spec_task.label_field}: {demo.label}")
        typer.echo(f"    {spec_task.text_field}: {demo.text}")
    if result.method == CliMethod.PROMPTPATE.value:
        stats = result.stats
        typer.echo(
            f"labelled {stats['answered']:.0f} of {stats['processed']:.0f} public inputs "
            f"({stats['rejected']:.0f} rejected); student holdout accuracy "
            f"{stats['holdout_accuracy']:.3f}"
        )
    typer.echo(
        f"epsilon = {result.epsilon:.4g} at delta = {result.delta:.3g} "
        f"({result.method}, {used_accounting.value} accounting, model {result.model})"
    )
    if out is not None:
        out.write_text(json.dumps(result.to_dict(), indent=2))
        typer.echo(f"wrote {out}")


def _check_promptpate_options(
    instruction_only: bool,
    public: Path | None,
    shots: int | None,
    M: int | None,
    N: int | None,
    tmax: int | None,
) -> None:
    """Refuse options PromptPATE would silently ignore, naming the ones it takes instead."""
    if public is None:
        raise fail("--method promptpate needs --public FILE (public unlabelled inputs)")
    if instruction_only:
        raise fail("--instruction-only is a baseline of the token-loop methods, not promptpate")
    if shots is not None:
        raise fail("--shots is for tang/adadpsyn; promptpate takes --student-shots")
    unused = [name for name, value in (("--M", M), ("--N", N), ("--tmax", tmax)) if value]
    if unused:
        raise fail(f"{', '.join(unused)} are for tang/adadpsyn, not promptpate")


def _with_progress(
    verb: str, unit: str, job: Callable[[Callable[[int, int], None]], SynthesisResult]
) -> SynthesisResult:
    """Run ``job`` with a transient progress bar on stderr fed by its progress callback."""
    with Progress(
        TextColumn(verb),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn(unit),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        bar_task = bar.add_task(unit, total=None)
        return job(lambda done, total: bar.update(bar_task, completed=done, total=total))


def _synthesise(
    task: TaskSpec, records: list[Record], config: SynthesisConfig, llm: LLMBackend
) -> SynthesisResult:
    return _with_progress(
        "synthesising",
        "tokens",
        lambda progress: synthesize(task, records, config, llm, progress=progress),
    )
